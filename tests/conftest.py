"""Shared fixtures. Real servers only: Redis (tests/fixtures/redis_server.py) and S3."""

pytest_plugins = ["tests.fixtures.redis_server"]

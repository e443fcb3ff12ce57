"""Shared fixtures. Real servers only: Redis (tests/fixtures/redis_server.py) and S3
(tests/fixtures/s3_server.py: SeaweedFS ``weed mini``)."""

pytest_plugins = ["tests.fixtures.redis_server", "tests.fixtures.s3_server"]

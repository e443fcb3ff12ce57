"""Fixtures for the Alibaba Cloud integration tests: the contract tests' fake ECS endpoint and
provider builder (real SDK, signature checked), and the agent tests' fake daemon, fake
instance metadata and REAL agent launcher."""

from __future__ import annotations

from tests.contract.providers.aliyun.conftest import (  # noqa: F401  (fixtures)
    aliyun_env,
    fake_ecs,
    fake_ecs_factory,
    make_provider,
)
from tests.integration.agent.conftest import (  # noqa: F401  (fixtures)
    fake_daemon,
    fake_imds,
    launch_agent,
)

"""Fixtures for the AWS adapter contract tests: test-only AWS credentials in the environment
(boto3's standard chain, isolated from the machine's ~/.aws), a local fake AWS endpoint and a
provider builder pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from providers.aws import AwsProvider, AwsSettings
from tests.contract.providers.aws.data import ADVISOR_FILE
from tests.contract.providers.aws.fake_aws import FakeAws

TEST_ACCESS_KEY = "AKIAFAKEFAKEFAKE0000"
TEST_SECRET_KEY = "fake-secret-key-used-only-by-tests-0000"


def isolate_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials in the env; no shared config/credentials files, no IMDS lookups."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION",
                 "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_SECRET_KEY)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_aws_env(monkeypatch, tmp_path)


@pytest.fixture
def fake_aws_factory() -> Iterator[Callable[..., FakeAws]]:
    started: list[FakeAws] = []

    def make(**kwargs: Any) -> FakeAws:
        fake = FakeAws(**kwargs)
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


@pytest.fixture
def make_provider(aws_env: None, tmp_path: Path) -> Iterator[Callable[..., AwsProvider]]:
    """``make_provider(fake, regions, clock=None, **settings) -> AwsProvider`` on the fake's
    endpoints, reading the real Spot Advisor file through a ``file://`` URL."""
    made: list[AwsProvider] = []

    def make(fake: FakeAws, regions: list[str], clock: Callable[[], datetime] | None = None,
             **settings: Any) -> AwsProvider:
        values: dict[str, Any] = {"regions": regions, "endpoint_url": fake.url,
                                  "pricing_endpoint_url": fake.url,
                                  "spot_advisor_url": ADVISOR_FILE.as_uri(), **settings}
        kwargs = {"clock": clock} if clock else {}
        provider = AwsProvider(AwsSettings(**values), tmp_path / "aws-cache", **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()

"""Fixtures for the AWS adapter against moto's EC2 server (``ThreadedMotoServer``: a real HTTP
server on 127.0.0.1, a free port, one per session).

moto's gaps, and what these fixtures do about them:

- ``describe_instances`` has no ``client-token`` filter in moto 5.2: the session fixture adds
  the attribute mapping moto itself uses for its other filters (test-only shim).
- ``run_instances`` ignores ``ClientToken`` in moto, so a second call makes a second instance;
  idempotency in these tests therefore comes from the adapter looking the token up first (EC2
  itself returns the first instance for a repeated token: see test_launch.py's Stubber tests).
- moto's spot prices are invented: no test here checks a price.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from providers.aws import AwsProvider, AwsSettings
from tests.contract.providers.aws.conftest import isolate_aws_env
from tests.contract.providers.aws.data import ADVISOR_FILE

REGIONS = ["us-east-1", "us-west-2"]


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    moto_server = pytest.importorskip("moto.server")
    import moto.ec2.utils as moto_ec2_utils

    # moto 5.2 lacks the filter; a later moto may have it natively (or renamed this table).
    mapping = getattr(moto_ec2_utils, "filter_dict_attribute_mapping", {})
    added = "client-token" not in mapping
    mapping.setdefault("client-token", "client_token")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
    if added:
        mapping.pop("client-token", None)


@pytest.fixture
def ec2(moto_url: str, aws_env: None) -> Callable[[str], Any]:
    """``ec2(region)``: a plain boto3 client on moto, to look behind the adapter's back."""
    return lambda region: boto3.client("ec2", endpoint_url=moto_url, region_name=region)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_aws_env(monkeypatch, tmp_path)


@pytest.fixture
def owner() -> str:
    """A fresh owner tag per test: moto's state lives for the whole session."""
    return f"ga-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def amis(moto_url: str) -> dict[str, str]:
    """One of moto's stock AMIs per region (listing them is slow: once per session)."""
    def first_ami(region: str) -> str:
        client = boto3.client("ec2", endpoint_url=moto_url, region_name=region,
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        return client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    return {r: first_ami(r) for r in REGIONS}


@pytest.fixture
def make_provider(moto_url: str, amis: dict[str, str], tmp_path: Path, aws_env: None
                  ) -> Iterator[Callable[..., AwsProvider]]:
    made: list[AwsProvider] = []

    def make(**settings: Any) -> AwsProvider:
        values: dict[str, Any] = {
            "regions": REGIONS, "endpoint_url": moto_url, "max_attempts": 2,
            "spot_advisor_url": ADVISOR_FILE.as_uri(),
            "launch": {"ami": amis, "agent_pip_spec": "gpu-arbiter==0.1.0"}, **settings}
        provider = AwsProvider(AwsSettings(**values), tmp_path / f"aws-{len(made)}")
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()

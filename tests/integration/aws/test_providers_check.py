"""``schedctl providers check`` with an AWS entry: against the local EC2/Price List fake every
check passes and the Spot Advisor cache age is shown (moto answers these probes too, but its
describe_instance_types ignores MaxResults and takes seconds); a dead endpoint fails per region;
credentials typed into the config are refused without being echoed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from scheduler.cli import app as cli_app
from scheduler.cli.main import app
from tests.contract.providers.aws.data import ADVISOR_FILE, needs_advisor
from tests.contract.providers.aws.fake_aws import FakeAws

pytestmark = needs_advisor


def _config(tmp_path: Path, **entry) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"providers": [
        {"kind": "replay", "market": "examples/market.yaml"},
        {"kind": "aws", "regions": ["us-east-1", "eu-west-1"], "max_attempts": 1,
         "spot_advisor_url": ADVISOR_FILE.as_uri(), **entry},
    ]}))
    return path


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_app.console, "width", 220)


def _run(tmp_path: Path, config: Path):
    examples = Path(__file__).resolve().parents[3] / "examples"
    (config.parent / "examples").symlink_to(examples)
    return CliRunner().invoke(app, ["providers", "check", "--config", str(config),
                                    "--home", str(tmp_path / "home")], terminal_width=200)


def test_check_against_local_endpoints(tmp_path: Path, aws_env: None) -> None:
    fake = FakeAws()
    try:
        result = _run(tmp_path, _config(tmp_path, endpoint_url=fake.url,
                                        pricing_endpoint_url=fake.url))
    finally:
        fake.stop()
    out = result.output
    assert result.exit_code == 0, out
    assert "FAILED" not in out
    for region in ("us-east-1", "eu-west-1"):
        assert out.count(region) >= 3  # three EC2 permissions per region
    assert "describe_spot_price_history" in out and "pricing:GetProducts" in out
    assert "found via env" in out and "spot advisor" in out and " s old" in out
    cached = list((tmp_path / "home" / "aws").glob("spot-advisor-*.json"))
    assert len(cached) == 1 and str(cached[0]) in out.replace("\n", "")
    assert "replay" in out and "no credentials needed" in out


def test_dead_endpoint_fails_each_region(tmp_path: Path, aws_env: None) -> None:
    result = _run(tmp_path, _config(tmp_path, endpoint_url="http://127.0.0.1:9",
                                    pricing_endpoint_url="http://127.0.0.1:9"))
    assert result.exit_code == 1
    assert result.output.count("FAILED") >= 7 and "cannot reach" in result.output
    assert "fake-secret" not in result.output


def test_credentials_in_the_config_are_refused_unechoed(tmp_path: Path) -> None:
    result = _run(tmp_path, _config(tmp_path, aws_secret_access_key="SUPER-SECRET-VALUE"))
    assert result.exit_code == 2
    assert "credentials do not belong" in result.output
    assert "SUPER-SECRET-VALUE" not in result.output

"""A misspelled region or an unknown GPU model is submitted with a warning (in the 201 answer,
printed by ``schedctl submit``) and the waiting reason in ``schedctl status`` says it; a VRAM
request the offers miss by a little names the sizes they report. Real Redis, real offer poller
over a real replay cloud, the real reconcile loop, the CLI against the served API."""

from __future__ import annotations

import httpx
import yaml
from typer.testing import CliRunner

from core.models import JobState
from scheduler.cli.main import app as cli
from scheduler.controller.reconcile import reconcile_pass
from scheduler.poller.offers import OfferPoller
from scheduler.store.known_names import KnownNames
from tests.integration.cli.conftest import TOKEN
from tests.integration.controller.conftest import controller_context, replay_market  # noqa: F401

# g5.xlarge as EC2 describes it: 22,888 MiB of GPU memory = 22.3515625 GiB.
MARKET = """
name: names
time_scale: 60
notice_seconds: 2
offers:
  - {provider: aws, region: us-west-2, zone: us-west-2a, instance_type: g5.xlarge,
     gpu_model: A10G, gpu_count: 1, vram_gib: 22.3515625, vcpus: 4, memory_gib: 16,
     on_demand_price_usd_per_hour: 1.006, spot_price_usd_per_hour: 0.45}
  - {provider: aws, region: us-east-1, zone: us-east-1a, instance_type: g4dn.xlarge,
     gpu_model: T4, gpu_count: 1, vram_gib: 15, vcpus: 4, memory_gib: 16,
     spot_price_usd_per_hour: 0.16}
"""


def _submit(served, spec: dict) -> dict:
    response = httpx.post(f"{served.url}/v1/jobs", json={"spec": spec},
                          headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 201, response.text
    return response.json()


def test_unknown_names_are_warned_at_submit_and_in_status(served, redis_client, replay_market,  # noqa: F811
                                                          tmp_path):
    provider = replay_market(MARKET)
    ctx = controller_context(redis_client, provider)
    OfferPoller(ctx.store, provider)()
    known = KnownNames(redis_client).names()
    assert known["region"] == {"us-west-2", "us-east-1"} and known["gpu_model"] == {"A10G", "T4"}
    assert known["instance_type"] == {"g5.xlarge", "g4dn.xlarge"}

    typo = {"name": "typo", "command": "python train.py", "regions": {"allow": ["us-west2"]},
            "resources": {"gpu_count": 1, "gpu_models": ["A10G", "H100"]}}
    job = _submit(served, typo)
    assert job["state"] == "pending"
    assert len(job["warnings"]) == 2
    assert "regions.allow: 'us-west2' matches no region any configured provider has listed " \
           "(closest: us-west-2" in job["warnings"][0]
    assert "resources.gpu_models: 'H100' matches no gpu model" in job["warnings"][1]
    good = _submit(served, {"name": "fine", "command": "python train.py",
                            "regions": {"allow": ["us-west-2"]}})
    assert good["warnings"] == []

    # The CLI prints the warning and still submits.
    spec_file = tmp_path / "typo.yaml"
    spec_file.write_text(yaml.safe_dump({**typo, "name": "typo-cli"}))
    runner = CliRunner()
    out = runner.invoke(cli, ["submit", str(spec_file), "--home", str(served.home)],
                        catch_exceptions=False)
    assert out.exit_code == 0 and "submitted typo-cli-" in out.output
    assert "'us-west2' matches no region" in out.output

    reconcile_pass(ctx)
    waiting = ctx.store.jobs.get(job["id"])
    assert waiting.state is JobState.PENDING
    assert "regions rejects" in waiting.waiting_reason
    assert "'us-west2' matches no region any configured provider has listed (closest: " \
           "us-west-2" in waiting.waiting_reason
    status = runner.invoke(cli, ["status", job["id"], "--home", str(served.home)],
                           catch_exceptions=False)
    flat = " ".join(status.output.split())
    assert status.exit_code == 0 and "'us-west2' matches no region" in flat
    assert "submitted anyway" in flat  # the submit-time warning is on the timeline too


def test_a_vram_request_just_above_the_offers_names_their_sizes(served, redis_client,
                                                                replay_market):  # noqa: F811
    provider = replay_market(MARKET)
    ctx = controller_context(redis_client, provider)
    OfferPoller(ctx.store, provider)()
    job = _submit(served, {"name": "big", "command": "python train.py",
                           "resources": {"gpu_count": 1, "min_vram_gib": 24},
                           "max_price_usd_per_hour": 0.3})
    assert job["warnings"] == []
    reconcile_pass(ctx)
    reason = ctx.store.jobs.get(job["id"]).waiting_reason
    assert "min_vram_gib rejects 3 offers under 24 GiB per GPU: A10G 22.35 GiB = 22,888 MiB " \
           "as aws reports it, T4 15 GiB" in reason
    assert "max_price_usd_per_hour rejects 2 offers above $0.3000/h: the cheapest of them is " \
           "$0.4500/h (aws/us-west-2a g5.xlarge spot)" in reason


def test_gpu_models_the_table_lacks_are_warned_at_submit(served):
    job = _submit(served, {"name": "v1000", "command": "python train.py", "expected_hours": 1,
                           "reference_gpu": "V1000", "work": {"throughput": {"FooGPU": 10}}})
    assert job["state"] == "pending"
    assert len(job["warnings"]) == 2
    assert "reference_gpu: 'V1000' is not in the GPU table (closest: V100" in job["warnings"][0]
    assert "work.throughput: 'FooGPU' is not in the GPU table" in job["warnings"][1]
    assert all("conservative prior" in w and "submitted anyway" in w for w in job["warnings"])
    known = _submit(served, {"name": "v100", "command": "python train.py",
                             "reference_gpu": "V100", "work": {"throughput": {"T4": 10}}})
    assert known["warnings"] == []

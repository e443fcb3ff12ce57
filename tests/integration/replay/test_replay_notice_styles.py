"""A replayed market holding Vast.ai-, Azure- and GCP-shaped spot offers, as a real cloud process
(stand-in agent): each instance's agent is told its cloud's metadata flavor, and a reclaim is
warned as that cloud does it — not at all (Vast), by a Scheduled Events Preempt that the agent
approves (Azure), by ``instance/preempted`` turning TRUE (GCP)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from core.models import TAG_JOB, TAG_OWNER, InstanceState, Market, utcnow
from core.models.base import ensure_utc
from providers.base import LaunchRequest
from providers.replay import ReplayProvider, procs
from scheduler.agent.notices import parse_rfc1123
from tests.fixtures.waiting import wait_until

# time_scale 60 with 60 s ticks: one trace tick per wall second; every offer is reclaimed
# 3 s after the cloud starts.
MARKET_YAML = """
name: styles
time_scale: 60
notice_seconds: 1.5
offers:
  - {provider: vastai, region: us, zone: us-1, instance_type: 1x_RTX_4090, gpu_model: RTX4090,
     gpu_count: 1, vram_gib: 24, vcpus: 8, memory_gib: 32, spot_price_usd_per_hour: 0.12,
     availability_trace: drop.json}
  - {provider: azure, region: eastus, zone: eastus-1, instance_type: Standard_NC4as_T4_v3,
     gpu_model: T4, gpu_count: 1, vram_gib: 16, vcpus: 4, memory_gib: 28,
     spot_price_usd_per_hour: 0.16, availability_trace: drop.json,
     notice: {style: azure, seconds: 2.5}}
  - {provider: gcp, region: us-central1, zone: us-central1-a, instance_type: g2-standard-4,
     gpu_model: L4, gpu_count: 1, vram_gib: 24, vcpus: 4, memory_gib: 16,
     spot_price_usd_per_hour: 0.28, availability_trace: drop.json}
"""


@pytest.fixture
def market_file(tmp_path: Path) -> Path:
    folder = tmp_path / "market"
    folder.mkdir()
    (folder / "drop.json").write_text(
        json.dumps({"metadata": {"gap_seconds": 60}, "data": [1, 1, 1] + [0] * 60}))
    path = folder / "market.yaml"
    path.write_text(MARKET_YAML)
    return path


def _launch(provider: ReplayProvider, cloud: str) -> tuple[str, dict, dict]:
    """Launch the spot offer of ``cloud``; returns (instance id, raw view, agent env)."""
    source = next(o for o in provider.market.offers if o.provider == cloud)
    offer = source.to_offer(Market.SPOT, 0, utcnow())
    inst = provider.launch(LaunchRequest(offer=offer, client_token=f"job-{cloud}",
                                         tags={TAG_OWNER: "itest", TAG_JOB: cloud}))
    raw = next(v for v in provider.describe_raw() if v["id"] == inst.id)
    info = Path(raw["work_dir"]) / "agent-info.json"
    wait_until(info.exists, 10, "the stand-in agent to start", interval_s=0.05)
    return inst.id, raw, json.loads(info.read_text())["env"]


def _raw(provider: ReplayProvider, instance_id: str) -> dict:
    return next(v for v in provider.describe_raw() if v["id"] == instance_id)


def _terminated(provider: ReplayProvider, instance_id: str, within_s: float) -> dict:
    return wait_until(lambda: (r := _raw(provider, instance_id))["state"] == "terminated" and r,
                      within_s, f"{instance_id} reclaimed", interval_s=0.05)


def test_offers_carry_each_clouds_notice(provider: ReplayProvider) -> None:
    notices = {o.provider: o.interruption_notice_s for o in provider.list_offers()}
    assert notices == {"vastai": 0, "azure": 2.5, "gcp": 1.5}


def test_vast_instance_is_reclaimed_without_any_notice(provider: ReplayProvider) -> None:
    instance_id, raw, env = _launch(provider, "vastai")
    assert env["GA_METADATA_FLAVOR"] == "none" and raw["notice_style"] == "none"
    meta = env["GA_METADATA_URL"]
    assert httpx.get(f"{meta}/latest/meta-data/spot/instance-action").status_code == 404
    pid = raw["pid"]
    seen_notice = []

    def reclaimed() -> dict | bool:
        row = _raw(provider, instance_id)
        seen_notice.append(row["notice"])
        return row["state"] == "terminated" and row

    gone = wait_until(reclaimed, 8, "the outbid instance to stop", interval_s=0.05)
    assert gone["terminated_reason"] == "preempted" and gone["notice"] is None
    assert not any(seen_notice)  # never a notice, not even for a moment
    assert not procs.group_alive(pid)
    # Killed outright, as a machine losing power: the agent got no SIGTERM either.
    assert not (Path(raw["work_dir"]) / "sigterm").exists()


def test_azure_instance_serves_scheduled_events_and_takes_the_approval(
        provider: ReplayProvider) -> None:
    instance_id, _, env = _launch(provider, "azure")
    assert env["GA_METADATA_FLAVOR"] == "azure"
    meta = env["GA_METADATA_URL"]
    url = f"{meta}/metadata/scheduledevents?api-version=2020-07-01"
    header = {"Metadata": "true"}
    assert httpx.get(url).status_code == 400  # Azure refuses a request without the header
    assert httpx.get(f"{meta}/metadata/scheduledevents", headers=header).status_code == 400
    assert httpx.get(f"{meta}/latest/meta-data/instance-id").status_code == 404  # not AWS
    name = httpx.get(f"{meta}/metadata/instance/compute/name?api-version=2021-02-01&format=text",
                     headers=header)
    assert name.text == instance_id
    assert httpx.get(url, headers=header).json() == {"DocumentIncarnation": 1, "Events": []}

    doc = wait_until(lambda: (d := httpx.get(url, headers=header).json())["Events"] and d, 8,
                     "the Preempt event", interval_s=0.05)
    event = doc["Events"][0]
    assert doc["DocumentIncarnation"] == 2
    assert (event["EventType"], event["EventStatus"], event["Resources"]) == \
        ("Preempt", "Scheduled", [instance_id])
    notice = _raw(provider, instance_id)["notice"]
    action_at = ensure_utc(parse_rfc1123(event["NotBefore"]))
    assert action_at.isoformat()[:19] == notice["action_at"][:19]
    assert httpx.post(url, headers=header, json={"StartRequests": [{"EventId": "nope"}]}
                      ).status_code == 400
    assert httpx.post(url, headers=header, json={"Start": []}).status_code == 400
    ok = httpx.post(url, headers=header, json={"StartRequests": [{"EventId": event["EventId"]}]})
    assert ok.status_code == 200
    started = httpx.get(url, headers=header).json()
    assert started["DocumentIncarnation"] == 3
    assert (started["Events"][0]["EventStatus"], started["Events"][0]["NotBefore"]) == \
        ("Started", "")
    assert _raw(provider, instance_id)["notice_approved_at"] is not None
    gone = _terminated(provider, instance_id, 6)
    assert gone["terminated_reason"] == "preempted"


def test_gcp_instance_serves_instance_preempted(provider: ReplayProvider) -> None:
    instance_id, _, env = _launch(provider, "gcp")
    assert env["GA_METADATA_FLAVOR"] == "gcp"
    url = f"{env['GA_METADATA_URL']}/computeMetadata/v1/instance/preempted"
    header = {"Metadata-Flavor": "Google"}
    assert httpx.get(url).status_code == 403
    assert httpx.get(url, headers=header).text == "FALSE"
    wait_until(lambda: httpx.get(url, headers=header).text == "TRUE", 8,
               "instance/preempted to turn TRUE", interval_s=0.05)
    row = _raw(provider, instance_id)
    assert row["state"] == InstanceState.RUNNING.value and row["notice"] is not None
    _terminated(provider, instance_id, 5)

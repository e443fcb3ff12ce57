"""The replayed market's per-offer ``speed``: validated in the market file, exported to the
instance's agent as ``SCHED_REPLAY_SPEED`` (and from the real agent on to the job)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from core.models import TAG_JOB, TAG_OWNER, Market, utcnow
from policies.gpu_table import gpu_spec
from providers.base import LaunchRequest
from providers.replay import ReplayProvider, shutdown_cloud
from providers.replay.market import MarketError, load_market
from tests.fixtures.waiting import wait_until
from tests.integration.agent.conftest import agent_env, kill_agents, start_agent
from tests.integration.agent.fakes import REPO_ROOT, AgentProcess, FakeDaemon

STANDIN_AGENT = Path(__file__).with_name("standin_agent.py")

OFFER = ("{region: r1, zone: r1a, instance_type: %s, gpu_model: %s, gpu_count: 1, "
         "vram_gib: 16, vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 0.5%s}")


def market(tmp_path: Path, *offers: str, catalog: str = "") -> Path:
    path = tmp_path / "market.yaml"
    path.write_text("name: speeds\ntime_scale: 60\noffers:\n"
                    + "".join(f"  - {o}\n" for o in offers) + catalog)
    return path


def test_speed_defaults_to_one_and_is_read_per_offer(tmp_path: Path) -> None:
    loaded = load_market(market(tmp_path, OFFER % ("slow", "T4", ", speed: 0.25"),
                                OFFER % ("plain", "A10G", "")))
    assert {o.instance_type: o.speed for o in loaded.offers} == {"slow": 0.25, "plain": 1.0}


def test_a_catalog_speed_applies_to_each_of_its_offers(tmp_path: Path) -> None:
    csv = tmp_path / "vms.csv"
    csv.write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,"
        "SpotPrice,Region,AvailabilityZone\n"
        'p3.2xlarge,V100,1,8,61,"{\'Gpus\': [{\'Name\': \'V100\', \'Manufacturer\': '
        "'NVIDIA', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 16384}}], "
        "'TotalGpuMemoryInMiB': 16384}\",3.06,0.918,us-east-1,us-east-1a\n")
    loaded = load_market(market(tmp_path, OFFER % ("plain", "T4", ""),
                                catalog=f"catalogs:\n  - {{path: {csv}, speed: 0.375}}\n"))
    assert {o.instance_type: o.speed for o in loaded.offers} == {"plain": 1.0,
                                                                "p3.2xlarge": 0.375}


@pytest.mark.parametrize("speed", ["0", "-1", "0.001", "1000", "fast", ".nan"])
def test_a_speed_out_of_bounds_is_refused_naming_the_field(tmp_path: Path, speed: str) -> None:
    with pytest.raises(MarketError) as info:
        load_market(market(tmp_path, OFFER % ("slow", "T4", f", speed: {speed}")))
    assert "offers.0.speed" in str(info.value) or "offers[0].speed" in str(info.value)


@pytest.fixture
def state_dir(tmp_path: Path):
    path = tmp_path / "cloud"
    yield path
    shutdown_cloud(path)


def test_the_instance_exports_its_offers_speed(tmp_path: Path, state_dir: Path) -> None:
    path = market(tmp_path, OFFER % ("slow", "T4", ", speed: 0.25"),
                  OFFER % ("plain", "A10G", ""))
    provider = ReplayProvider(path, state_dir, [sys.executable, str(STANDIN_AGENT)])
    try:
        seen = {}
        for offer in provider.market.offers:
            request = LaunchRequest(
                offer=offer.to_offer(Market.ON_DEMAND, 0, utcnow()),
                client_token=f"job-{offer.instance_type}", agent_env={"SCHED_REPLAY_SPEED": "9"},
                tags={TAG_OWNER: "itest", TAG_JOB: f"job-{offer.instance_type}"})
            inst = provider.launch(request)
            work_dir = next(v for v in provider.describe_raw() if v["id"] == inst.id)["work_dir"]
            info = Path(work_dir) / "agent-info.json"
            wait_until(info.exists, 10, "agent-info.json", interval_s=0.05)
            seen[offer.instance_type] = json.loads(info.read_text())["env"]["SCHED_REPLAY_SPEED"]
        # The market's value, whatever the daemon's agent_env says.
        assert seen == {"slow": "0.25", "plain": "1"}
    finally:
        provider.close()


def test_the_agent_hands_the_speed_on_to_the_job(tmp_path: Path, launch_agent_for_speed) -> None:
    daemon, agent = launch_agent_for_speed("0.25")
    assert agent.wait(30) == 0, agent.log()
    assert "speed=0.25" in daemon.log_lines()


@pytest.fixture
def launch_agent_for_speed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A real agent (``python -m scheduler.agent``) started as a replayed instance starts it,
    with ``SCHED_REPLAY_SPEED`` in its environment, running a job that prints it."""
    daemon = FakeDaemon()
    started: list[AgentProcess] = []

    def launch(speed: str):
        work_dir = tmp_path / "instance"
        spec = {"name": "speed", "command": f"{sys.executable} -c "
                "\"import os; print('speed=' + os.environ['SCHED_REPLAY_SPEED'])\""}
        env = agent_env(work_dir, daemon.base_url, daemon.token, job_id="job-speed", attempt=1,
                        instance_id="r-1", store_url=str(tmp_path / "store"), spec=spec,
                        SCHED_REPLAY_SPEED=speed)
        agent = start_agent(work_dir, env)
        started.append(agent)
        return daemon, agent

    yield launch
    kill_agents(started)
    daemon.stop()


def test_the_heterogeneous_example_market_is_cheapest_per_hour_on_one_gpu_and_to_finish_on_another(
) -> None:
    loaded = load_market(REPO_ROOT / "examples" / "markets" / "heterogeneous.yaml")
    rows = []
    for offer in loaded.offers:
        # The market's speeds are the GPU table's transformer priors (its header says so).
        assert offer.speed == pytest.approx(gpu_spec(offer.gpu_model).transformer, abs=1e-4)
        for kind in offer.markets():
            rows.append((offer.price_at(kind, 0.0), offer.gpu_model, offer.speed))
    cheapest_per_hour = min(rows)
    cheapest_to_finish = min(rows, key=lambda r: r[0] / r[2])
    assert cheapest_per_hour[1] == "T4" and cheapest_to_finish[1] == "RTX4090"
    # By hand (the header's table): 0.158 / 0.1506 = 1.05 vs 0.40 / 0.74 = 0.54 per A100-hour.
    assert cheapest_per_hour[0] / cheapest_per_hour[2] == pytest.approx(1.049, abs=1e-3)
    assert cheapest_to_finish[0] / cheapest_to_finish[2] == pytest.approx(0.541, abs=1e-3)

"""Offer capacity in the replayed market: instance counts from a trace or an ``instances`` pool,
launches refused beyond them, the excess reclaimed when a trace's count drops, and
``boot_failures`` (a launch the cloud accepted but never booted). In-process clouds on a
driven clock with real agent processes, and one cloud process through ReplayProvider."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from core.models import TAG_JOB, InstanceState, Market, OfferKey, utcnow
from providers.base import LaunchRequest
from providers.errors import CapacityError
from providers.replay import ReplayProvider, procs
from providers.replay.instances import CloudError, ReplayCloud
from providers.replay.market import load_market
from tests.fixtures.waiting import wait_until

STANDIN_AGENT = Path(__file__).with_name("standin_agent.py")
MACHINE = "gpu_model: T4, gpu_count: 1, vram_gib: 16, vcpus: 4, memory_gib: 16"
# time_scale 1: market seconds are wall seconds of the driven clock. The pool's trace counts
# 3 instances for two minutes, then 1, then 3 again.
MARKET = f"""
name: capacity
notice_seconds: 5
agent_start_timeout_s: 20
offers:
  - {{region: r1, zone: r1a, instance_type: pool, {MACHINE}, spot_price_usd_per_hour: 0.2,
     availability_trace: pool.json}}
  - {{region: r1, zone: r1a, instance_type: fixed, {MACHINE}, on_demand_price_usd_per_hour: 0.5,
     spot_price_usd_per_hour: 0.2, instances: 2}}
  - {{region: r1, zone: r1b, instance_type: broken, {MACHINE}, on_demand_price_usd_per_hour: 0.5,
     boot_failures: 1}}
  - {{region: r1, zone: r1b, instance_type: free, {MACHINE}, on_demand_price_usd_per_hour: 0.5}}
"""
POOL_COUNTS = [3, 3, 1, 1, 1, 3]


def _key(instance_type: str, market: Market = Market.SPOT) -> OfferKey:
    zone = "r1b" if instance_type in ("broken", "free") else "r1a"
    return OfferKey(provider="replay", region="r1", zone=zone, instance_type=instance_type,
                    market=market)


@pytest.fixture
def market_path(tmp_path: Path) -> Path:
    folder = tmp_path / "market"
    folder.mkdir()
    (folder / "pool.json").write_text(
        json.dumps({"metadata": {"gap_seconds": 60}, "data": POOL_COUNTS}))
    (folder / "market.yaml").write_text(MARKET)
    return folder / "market.yaml"


class DrivenCloud:
    """An in-process cloud whose clock the test moves (``at(s)``: that many seconds after the
    epoch), with helpers to launch and to read capacities."""

    def __init__(self, market_path: Path, state_dir: Path) -> None:
        self.now = datetime.now().astimezone()
        self.cloud = ReplayCloud(load_market(market_path), state_dir,
                                 [sys.executable, str(STANDIN_AGENT)], now=lambda: self.now)
        self.cloud.base_url = "http://127.0.0.1:9"
        self.epoch = self.cloud.clock.epoch_wall
        self.at(0)
        self._tokens = 0

    def at(self, seconds: float) -> None:
        self.now = self.epoch + timedelta(seconds=seconds)

    def launch(self, key: OfferKey, token: str | None = None) -> dict:
        self._tokens += 1
        status, view = self.cloud.launch({"offer": key.model_dump(mode="json"),
                                          "client_token": token or f"tok-{self._tokens}"})
        assert status in (200, 201)
        return view

    def capacity(self, key: OfferKey) -> int | None:
        [offer] = [o for o in self.cloud.offers()
                   if (o["instance_type"], o["market"]) == (key.instance_type, key.market.value)]
        return offer["capacity"]

    def record(self, instance_id: str):
        return self.cloud.store.data.instances[instance_id]


@pytest.fixture
def driven(market_path: Path, tmp_path: Path) -> Iterator[DrivenCloud]:
    made = DrivenCloud(market_path, tmp_path / "state")
    yield made
    for rec in made.cloud.store.data.instances.values():
        procs.signal_group(rec.pid, signal.SIGKILL)


def _wait_terminated(driven: DrivenCloud, instance_id: str) -> None:
    def done() -> bool:
        driven.cloud.tick()
        return driven.record(instance_id).state is InstanceState.TERMINATED

    wait_until(done, 10, f"{instance_id} terminated", interval_s=0.05)


def test_capacity_follows_the_trace_count_and_decreases_as_instances_launch(
        driven: DrivenCloud) -> None:
    pool = _key("pool")
    assert driven.capacity(pool) == 3
    first = driven.launch(pool)
    assert driven.capacity(pool) == 2
    driven.launch(pool)
    driven.launch(pool)
    # A full offer is still listed, with nothing left.
    assert driven.capacity(pool) == 0
    with pytest.raises(CloudError) as refused:
        driven.launch(pool)
    assert refused.value.status == 409 and refused.value.code == "InsufficientInstanceCapacity"
    assert "no capacity left" in refused.value.message
    # A terminated instance gives its slot back (a shutting-down one still holds it).
    driven.cloud.terminate(first["id"])
    assert driven.capacity(pool) == 0
    _wait_terminated(driven, first["id"])
    assert driven.capacity(pool) == 1
    # Offers with neither a trace nor a pool are unbounded, as before.
    assert driven.capacity(_key("free", Market.ON_DEMAND)) is None


def test_an_instances_pool_bounds_each_market_of_the_offer(driven: DrivenCloud) -> None:
    on_demand, spot = _key("fixed", Market.ON_DEMAND), _key("fixed")
    assert (driven.capacity(on_demand), driven.capacity(spot)) == (2, 2)
    driven.launch(on_demand)
    driven.launch(on_demand)
    assert (driven.capacity(on_demand), driven.capacity(spot)) == (0, 2)
    with pytest.raises(CloudError, match="no capacity left"):
        driven.launch(on_demand)
    driven.launch(spot)
    assert driven.capacity(spot) == 1


def test_a_count_drop_reclaims_the_newest_instances_after_a_notice(
        driven: DrivenCloud) -> None:
    pool = _key("pool")
    ids = []
    for second in (0, 1, 2):
        driven.at(second)
        ids.append(driven.launch(pool)["id"])
    oldest, middle, newest = ids
    driven.at(100)
    driven.cloud.tick()
    assert all(driven.record(i).notice is None for i in ids)
    # Tick 2 counts one instance: the two newest are warned, the oldest keeps running.
    driven.at(121)
    driven.cloud.tick()
    warned = {i for i in ids if driven.record(i).notice is not None}
    assert warned == {middle, newest}
    notice = driven.record(newest).notice
    assert notice.action_at == driven.epoch + timedelta(seconds=126)  # notice_seconds 5
    assert driven.capacity(pool) == 0
    # Warned instances count toward the excess: the next pass warns no one else.
    driven.at(123)
    driven.cloud.tick()
    assert driven.record(oldest).notice is None
    driven.at(127)
    driven.cloud.tick()
    for instance_id in (middle, newest):
        rec = driven.record(instance_id)
        assert rec.state is InstanceState.TERMINATED and rec.terminated_reason == "preempted"
    assert driven.record(oldest).state is InstanceState.RUNNING
    assert driven.capacity(pool) == 0
    # Back to a count of 3: two slots again, and nothing more is reclaimed.
    driven.at(301)
    driven.cloud.tick()
    assert driven.capacity(pool) == 2 and driven.record(oldest).notice is None


def test_boot_failures_keep_the_first_launch_pending_and_the_next_one_boots(
        driven: DrivenCloud) -> None:
    broken = _key("broken", Market.ON_DEMAND)
    stuck = driven.launch(broken, "gang-n0")
    assert stuck["state"] == "pending" and stuck["boot_failed"] and stuck["pid"] is None
    # Retrying the launch with its client token does not boot it either.
    again = driven.launch(broken, "gang-n0")
    assert again["id"] == stuck["id"] and again["state"] == "pending" and again["pid"] is None
    booted = driven.launch(broken, "gang-n1")
    assert booted["state"] == "running" and not booted["boot_failed"]
    wait_until((Path(booted["work_dir"]) / "starts.log").exists, 10, "the agent started")
    driven.cloud.tick()
    assert driven.record(stuck["id"]).state is InstanceState.PENDING
    assert not (Path(stuck["work_dir"]) / "starts.log").exists()
    # It stays pending until terminated, then is gone like any other instance.
    driven.cloud.terminate(stuck["id"])
    _wait_terminated(driven, stuck["id"])
    assert driven.record(stuck["id"]).terminated_reason == "user-terminated"
    # The count of launches is the cloud's whole life: later launches boot.
    assert driven.launch(broken, "gang-n2")["state"] == "running"


@pytest.fixture
def make_capacity_provider(market_path: Path, tmp_path: Path
                           ) -> Iterator[Callable[[], ReplayProvider]]:
    made: list[ReplayProvider] = []

    def make() -> ReplayProvider:
        provider = ReplayProvider(market_path, tmp_path / "cloud",
                                  [sys.executable, str(STANDIN_AGENT)])
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.shutdown_cloud()
        provider.close()


def test_through_the_provider_capacity_is_listed_and_a_full_offer_refused(
        make_capacity_provider: Callable[[], ReplayProvider]) -> None:
    provider = make_capacity_provider()
    assert provider.agent_start_timeout_s == 20
    offers = {o.key: o for o in provider.list_offers()}
    assert offers[_key("fixed", Market.ON_DEMAND)].capacity == 2
    assert offers[_key("free", Market.ON_DEMAND)].capacity is None
    fixed = offers[_key("fixed", Market.ON_DEMAND)]
    for rank in range(2):
        provider.launch(LaunchRequest(offer=fixed, client_token=f"job-1-n{rank}",
                                      tags={TAG_JOB: "job-1"}))
    assert {o.key: o for o in provider.list_offers()}[fixed.key].capacity == 0
    with pytest.raises(CapacityError, match="no capacity left"):
        provider.launch(LaunchRequest(offer=fixed, client_token="job-1-n2"))
    stuck = provider.launch(LaunchRequest(offer=offers[_key("broken", Market.ON_DEMAND)],
                                          client_token="job-2-n0"))
    assert stuck.state is InstanceState.PENDING
    assert offers[_key("broken", Market.ON_DEMAND)].observed_at <= utcnow()
    [raw] = [v for v in provider.describe_raw() if v["id"] == stuck.id]
    assert raw["state"] == "pending" and raw["boot_failed"] and not raw["pid_alive"]
    # offers_now without the cloud counts what state.json holds.
    provider.shutdown_cloud()
    assert {o.key: o for o in provider.offers_now()}[fixed.key].capacity == 2

"""The replay cloud as a real process, driven through ReplayProvider (stand-in agent)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from pathlib import Path

import httpx
import pytest

from providers.base import Compute, LaunchRequest, Renames
from providers.errors import CapacityError, ProviderError
from providers.replay import ReplayProvider, procs
from core.models import (
    TAG_JOB,
    TAG_OWNER,
    InstanceState,
    Market,
    Offer,
    utcnow,
)
from tests.fixtures.waiting import wait_until


def _offer(provider: ReplayProvider, instance_type: str, market: Market = Market.SPOT) -> Offer:
    for zone_offer in provider.market.offers:
        if zone_offer.instance_type == instance_type:
            return zone_offer.to_offer(market, 0, utcnow())
    raise KeyError(instance_type)


def _request(offer: Offer, token: str, **env: str) -> LaunchRequest:
    return LaunchRequest(offer=offer, client_token=token,
                         tags={TAG_OWNER: "itest", TAG_JOB: token}, agent_env=env)


def _info(work_dir: str) -> dict:
    path = Path(work_dir) / "agent-info.json"
    wait_until(path.exists, 10, f"{path.name} written", interval_s=0.05)
    return json.loads(path.read_text())


def _cloud_file(state_dir: Path) -> dict:
    return json.loads((state_dir / "cloud.json").read_text())


def _raw(provider: ReplayProvider, instance_id: str) -> dict:
    return next(v for v in provider.describe_raw() if v["id"] == instance_id)


def test_offers_and_prices(provider: ReplayProvider) -> None:
    assert isinstance(provider, Compute) and isinstance(provider, Renames)
    assert provider.agent_start_timeout_s == 300
    assert provider.provider_names == {"replay", "other"} and provider.name == "replay"
    assert provider.time_scale == 60
    started = utcnow()
    keys = {o.key.series() for o in provider.list_offers()}
    # "gone" is spot-only and its trace reads 0: left out
    assert keys == {"replay/r1/r1a/steady/on-demand", "replay/r1/r1a/steady/spot",
                    "replay/r1/r1b/flaky/spot"}
    opening = provider.poll_prices()
    assert {o.series for o in opening} == keys | {"other/r2/r2a/gone/spot"}
    steady_spot = [o for o in opening if o.series == "replay/r1/r1a/steady/spot"]
    assert [o.price_usd_per_hour for o in steady_spot] == [0.2]
    # the 0.02 market-hour step (72 market s = 1.2 wall s) shows up once it has passed
    step = wait_until(lambda: [o for o in provider.poll_prices(started)
                               if o.price_usd_per_hour == 0.22], 5, "the step to $0.22",
                      interval_s=0.05)
    assert step[0].series == "replay/r1/r1a/steady/spot" and step[0].observed_at > started


def test_launch_starts_agent_in_its_work_dir(provider: ReplayProvider, state_dir: Path) -> None:
    inst = provider.launch(_request(_offer(provider, "steady"), "job-1-1", TEST_SECRET="s3"))
    assert re.fullmatch(r"r-[0-9a-f]{12}", inst.id)
    assert inst.state is InstanceState.RUNNING and inst.provider == "replay"
    raw = _raw(provider, inst.id)
    info = _info(raw["work_dir"])
    assert Path(raw["work_dir"]) == state_dir.resolve() / "instances" / inst.id
    assert info["cwd"] == raw["work_dir"] and info["pid"] == raw["pid"] and raw["pid_alive"]
    url = _cloud_file(state_dir)["url"]
    assert info["env"] == {"GA_INSTANCE_ID": inst.id, "GA_METADATA_URL": f"{url}/meta/{inst.id}",
                           "GA_METADATA_FLAVOR": "aws", "GA_WORK_DIR": raw["work_dir"],
                           "SCHED_REPLAY_SPEED": "1", "TEST_SECRET": "s3"}
    # the agent runs in its own session, so it outlives the cloud and the daemon
    assert os.getsid(info["pid"]) == info["pid"]
    assert [i.id for i in provider.describe({TAG_JOB: "job-1-1"})] == [inst.id]
    assert provider.describe({TAG_JOB: "someone-else"}) == []
    # agent_env may hold secrets: it must not be written to the cloud's state
    assert "s3" not in (state_dir / "state.json").read_text()


def test_launch_is_idempotent_on_client_token(provider: ReplayProvider) -> None:
    offer = _offer(provider, "steady")
    results: list[str] = []

    def launch() -> None:
        results.append(provider.launch(_request(offer, "job-2-1")).id)

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    again = provider.launch(_request(offer, "job-2-1"))
    assert len(set(results + [again.id])) == 1
    work_dir = Path(_raw(provider, again.id)["work_dir"])
    _info(str(work_dir))
    assert len((work_dir / "starts.log").read_text().split()) == 1
    assert len(provider.describe()) == 1
    with pytest.raises(ProviderError) as info:
        provider.launch(_request(_offer(provider, "steady", Market.ON_DEMAND), "job-2-1"))
    assert info.value.code == "IdempotentParameterMismatch"


def test_capacity_and_unknown_offer(provider: ReplayProvider) -> None:
    with pytest.raises(CapacityError) as info:
        provider.launch(_request(_offer(provider, "gone"), "job-3-1"))
    assert info.value.code == "InsufficientInstanceCapacity" and info.value.provider == "other"
    assert "reclaimed" in str(info.value)
    unknown = _offer(provider, "steady").model_copy(update={"zone": "r1z"})
    with pytest.raises(ProviderError) as info:
        provider.launch(_request(unknown, "job-3-2"))
    assert not isinstance(info.value, CapacityError)
    assert "no offer replay/r1/r1z/steady/spot" in str(info.value)
    assert provider.describe() == []


def test_preemption_notice_over_imds_then_reclaim(provider: ReplayProvider,
                                                  state_dir: Path) -> None:
    inst = provider.launch(_request(_offer(provider, "flaky"), "job-4-1"))
    meta = _info(_raw(provider, inst.id)["work_dir"])["env"]["GA_METADATA_URL"]
    action_url = f"{meta}/latest/meta-data/spot/instance-action"
    assert httpx.put(f"{meta}/latest/api/token").status_code == 400  # TTL header required
    token = httpx.put(f"{meta}/latest/api/token",
                      headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"}).text
    auth = {"X-aws-ec2-metadata-token": token}
    assert httpx.get(action_url).status_code == 401
    assert httpx.get(action_url, headers={"X-aws-ec2-metadata-token": "1.bad"}).status_code == 401
    assert httpx.get(f"{meta}/latest/meta-data/instance-id", headers=auth).text == inst.id
    assert httpx.get(action_url, headers=auth).status_code == 404  # no notice yet

    # the trace drops 3 s after the cloud started
    resp = wait_until(lambda: (r := httpx.get(action_url, headers=auth)).status_code == 200
                      and r, 8, "spot/instance-action to answer 200", interval_s=0.05)
    body = resp.json()
    assert set(body) == {"action", "time"} and body["action"] == "terminate"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", body["time"])
    noticed = next(i for i in provider.describe() if i.id == inst.id)
    assert noticed.state is InstanceState.RUNNING and noticed.notice is not None
    assert 1 <= (noticed.notice.action_at - noticed.notice.received_at).total_seconds() <= 2
    assert provider.list_offers() and "flaky" not in {o.instance_type
                                                      for o in provider.list_offers()}
    with pytest.raises(CapacityError):
        provider.launch(_request(_offer(provider, "flaky"), "job-4-2"))

    # reclaim: notice_seconds (1.5 s) later the process group is killed
    pid = _raw(provider, inst.id)["pid"]
    gone = wait_until(lambda: [i for i in provider.describe()
                               if i.id == inst.id and i.state is InstanceState.TERMINATED],
                      5, "the reclaimed instance terminated", interval_s=0.05)[0]
    assert gone.terminated_reason == "preempted"
    assert not _raw(provider, inst.id)["pid_alive"] and not procs.group_alive(pid)
    # a killed process gets no SIGTERM: the agent's only warning was the notice
    assert not (Path(_raw(provider, inst.id)["work_dir"]) / "sigterm").exists()


def test_terminate_is_idempotent(provider: ReplayProvider) -> None:
    inst = provider.launch(_request(_offer(provider, "steady", Market.ON_DEMAND), "job-5-1"))
    work_dir = Path(_raw(provider, inst.id)["work_dir"])
    _info(str(work_dir))
    provider.terminate(inst.id)
    assert next(i for i in provider.describe() if i.id == inst.id).state.is_gone()
    done = wait_until(lambda: [i for i in provider.describe()
                               if i.id == inst.id and i.state is InstanceState.TERMINATED],
                      10, "the instance terminated", interval_s=0.05)[0]
    assert done.terminated_reason == "user-terminated"
    assert (work_dir / "sigterm").exists()  # SIGTERM first, like a VM shutdown
    provider.terminate(inst.id)
    provider.terminate("r-000000000000")
    # a terminated instance's token still returns it, and launches nothing new
    assert provider.launch(_request(_offer(provider, "steady", Market.ON_DEMAND),
                                    "job-5-1")).state is InstanceState.TERMINATED
    assert len((work_dir / "starts.log").read_text().split()) == 1


def test_agent_that_exits_leaves_the_instance_running(provider: ReplayProvider) -> None:
    inst = provider.launch(_request(_offer(provider, "steady"), "job-6-1", TEST_EXIT_NOW="1"))
    wait_until(lambda: not _raw(provider, inst.id)["pid_alive"], 10, "the agent process gone",
               interval_s=0.05)
    assert _raw(provider, inst.id)["state"] == "running"


def test_cloud_restart_after_sigkill_keeps_state_and_port(provider: ReplayProvider,
                                                          state_dir: Path) -> None:
    inst = provider.launch(_request(_offer(provider, "steady"), "job-7-1"))
    work_dir = Path(_raw(provider, inst.id)["work_dir"])
    agent_pid = _info(str(work_dir))["pid"]
    meta = f"{_cloud_file(state_dir)['url']}/meta/{inst.id}"
    token = httpx.put(f"{meta}/latest/api/token",
                      headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}).text
    before = _cloud_file(state_dir)
    epoch = json.loads((state_dir / "state.json").read_text())["epoch_wall"]

    os.kill(before["pid"], signal.SIGKILL)
    wait_until(lambda: not procs.is_alive(before["pid"]), 10, "the cloud process gone",
               interval_s=0.05)
    assert procs.is_alive(agent_pid)  # the instance survives its cloud

    # the next call starts a new cloud process, which reuses the port and the state
    [again] = provider.describe()
    after = _cloud_file(state_dir)
    assert after["pid"] != before["pid"] and after["port"] == before["port"]
    assert again.id == inst.id and again.state is InstanceState.RUNNING
    assert _raw(provider, inst.id)["pid_alive"]
    assert json.loads((state_dir / "state.json").read_text())["epoch_wall"] == epoch
    # a metadata token issued before the restart still works
    resp = httpx.get(f"{meta}/latest/meta-data/instance-id",
                     headers={"X-aws-ec2-metadata-token": token})
    assert resp.status_code == 200 and resp.text == inst.id
    assert provider.launch(_request(_offer(provider, "steady"), "job-7-1")).id == inst.id
    assert len((work_dir / "starts.log").read_text().split()) == 1


def test_racing_callers_start_one_cloud(make_provider, state_dir: Path) -> None:
    providers = [make_provider() for _ in range(4)]
    barrier = threading.Barrier(len(providers))
    errors: list[BaseException] = []

    def call(p: ReplayProvider) -> None:
        barrier.wait()
        try:
            p.list_offers()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(p,)) for p in providers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    log = (state_dir / "cloud.log").read_text()
    assert log.count("serving http://") == 1 and "another replay cloud" not in log


def test_idle_cloud_exits_and_is_restarted(make_provider, state_dir: Path) -> None:
    provider = make_provider(idle_exit_s=1.0)
    provider.list_offers()
    pid = _cloud_file(state_dir)["pid"]
    wait_until(lambda: not procs.is_alive(pid), 8, "the cloud process gone", interval_s=0.05)
    assert provider.list_offers()  # started again on demand
    assert _cloud_file(state_dir)["pid"] != pid


def test_shutdown_stops_everything(provider: ReplayProvider, state_dir: Path) -> None:
    inst = provider.launch(_request(_offer(provider, "steady"), "job-8-1"))
    agent_pid = _info(_raw(provider, inst.id)["work_dir"])["pid"]
    cloud_pid = _cloud_file(state_dir)["pid"]
    provider.shutdown_cloud(reset_market=True)
    assert not procs.is_alive(cloud_pid) and not procs.is_alive(agent_pid)
    assert not (state_dir / "state.json").exists() and not (state_dir / "cloud.json").exists()


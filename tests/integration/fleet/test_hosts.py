"""Reaching real sshd hosts: host keys verified, GPUs detected, offers as free slot shapes."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from providers.errors import AuthError, TransientError
from providers.fleet.provider import FleetProvider
from providers.fleet.settings import FleetSettings
from providers.fleet.setup import from_config
from providers.fleet.ssh import HostKeyError
from tests.fixtures.sshd import FakeGpu
from tests.integration.fleet.conftest import FleetEnv


def _other_key(tmp_path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")],
                   check=True)
    return " ".join((tmp_path / "k.pub").read_text().split()[:2])


def test_unknown_host_key_is_refused(fleet_env: FleetEnv, tmp_path) -> None:
    # from_config refuses a host with no trusted key up front; a known_hosts file edited
    # under a running daemon can still lose it, which is what this builds directly.
    entry = fleet_env.config()
    entry["hosts"] = [h for h in entry["hosts"] if h["name"] == "gpu-a"]
    del entry["hosts"][0]["host_key"]
    other = fleet_env.ssh.hosts["gpu-b"]
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{other.port} {other.host_key}\n")
    entry["known_hosts"] = str(tmp_path / "known_hosts")
    settings = FleetSettings.model_validate({k: v for k, v in entry.items() if k != "kind"})
    adapter = FleetProvider(settings, fleet_env.ledger())
    with pytest.raises(HostKeyError, match="host key unknown") as info:
        adapter.inventory(settings.hosts[0])
    assert info.value.code == "HostKeyUnknown" and isinstance(info.value, AuthError)
    [row] = adapter.check()
    assert not row.ok and "host key unknown" in row.detail
    with pytest.raises(TransientError, match="no fleet host answered"):
        adapter.list_offers()
    adapter.close()


def test_changed_host_key_is_refused(fleet_env: FleetEnv, tmp_path) -> None:
    entry = fleet_env.config()
    entry["hosts"][0]["host_key"] = _other_key(tmp_path)  # pinned: not what the host has
    adapter = from_config(entry, tmp_path, tmp_path)
    with pytest.raises(HostKeyError, match="host key changed") as info:
        adapter.inventory(adapter.settings.hosts[0])
    assert info.value.code == "HostKeyChanged"
    # The other hosts still answer and list their slots.
    offers = adapter.list_offers()
    assert {o.instance_type.split(".")[0] for o in offers} == {"gpu-b", "gpu-c"}
    adapter.close()


def test_known_hosts_alone_is_trusted(fleet_env: FleetEnv) -> None:
    entry = fleet_env.config()
    for host in entry["hosts"]:
        del host["host_key"]
    adapter = from_config(entry, fleet_env.ssh.folder, fleet_env.ssh.folder)
    assert all(row.ok for row in adapter.check()), adapter.check()
    adapter.close()


def test_gpus_detected_normalised_and_configured_without_nvidia_smi(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    a, b, c = adapter.settings.hosts
    inv_a = adapter.inventory(a)
    assert [(g.index, g.model, g.vram_gib, g.foreign) for g in inv_a.gpus] == [
        (i, "RTX4090", 24.0, False) for i in range(4)]
    assert inv_a.vcpus >= 1 and inv_a.memory_gib > 0
    assert [(g.model, g.vram_gib) for g in adapter.inventory(b).gpus] == [("V100", 16.0)] * 2
    inv_c = adapter.inventory(c)  # no nvidia-smi there: the configured GPUs
    assert [(g.index, g.model, g.uuid) for g in inv_c.gpus] == [(0, "RTX4090", None)]
    assert adapter.ledger.last_seen().keys() == {"gpu-a", "gpu-b", "gpu-c"}


def test_offers_are_free_slot_shapes_and_shrink_as_slots_are_claimed(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    offers = {o.instance_type: o for o in adapter.list_offers()}
    assert sorted(offers) == ["gpu-a.1xRTX4090", "gpu-a.2xRTX4090", "gpu-a.3xRTX4090",
                              "gpu-a.4xRTX4090", "gpu-b.1xV100", "gpu-b.2xV100",
                              "gpu-c.1xRTX4090"]
    two = offers["gpu-a.2xRTX4090"]
    assert (two.provider, two.region, two.zone, two.market.value) == (
        fleet_env.name, "on-prem", "gpu-a", "on-demand")
    assert (two.gpu_model, two.gpu_count, two.vram_gib, two.interruption_risk,
            two.interruption_notice_s, two.price_usd_per_hour) == ("RTX4090", 2, 24.0, 0.0, None, 0.0)
    assert len({o.key for o in offers.values()}) == len(offers)

    ledger = fleet_env.ledger()
    ledger.claim("gpu-a", [0, 1, 2], 3, "gpu-a.other-1")
    assert sorted(o.instance_type for o in adapter.list_offers()
                  if o.zone == "gpu-a") == ["gpu-a.1xRTX4090"]
    ledger.claim("gpu-a", [3], 1, "gpu-a.other-2")
    assert not [o for o in adapter.list_offers() if o.zone == "gpu-a"]  # full: none
    ledger.release("gpu-a.other-1")
    assert len([o for o in adapter.list_offers() if o.zone == "gpu-a"]) == 3


def test_cost_labels_and_prices(fleet_env: FleetEnv) -> None:
    entry = fleet_env.config()
    entry["hosts"][1].update(cost_per_gpu_hour_usd=0.25, labels={"site": "lab", "rack": "r7"})
    adapter = from_config(entry, fleet_env.ssh.folder, fleet_env.ssh.folder)
    v100 = {o.gpu_count: o for o in adapter.list_offers() if o.gpu_model == "V100"}
    assert (v100[2].region, v100[2].zone, v100[2].price_usd_per_hour) == ("lab", "r7", 0.5)
    prices = {o.series: o.price_usd_per_hour for o in adapter.poll_prices()}
    assert prices[v100[1].key.series()] == 0.25 and prices[v100[2].key.series()] == 0.5
    assert len(prices) == 7
    assert adapter.poll_prices(v100[1].observed_at) == []  # constant prices: reported once
    adapter.close()


def test_a_gpu_busy_with_a_foreign_process_is_not_offered(fleet_env: FleetEnv) -> None:
    host = fleet_env.ssh.hosts["gpu-b"]
    adapter = fleet_env.provider()
    try:
        host.set_foreign_processes({0: 4242})
        gpus = adapter.inventory(adapter.settings.hosts[1]).gpus
        assert [g.foreign for g in gpus] == [True, False]
        assert sorted(o.instance_type for o in adapter.list_offers()
                      if o.zone == "gpu-b") == ["gpu-b.1xV100"]
        # No process listed, but most of its memory in use (another container's job).
        host.set_foreign_processes({})
        host.set_gpus([FakeGpu("Tesla V100-SXM2-16GB", 16160),
                       FakeGpu("Tesla V100-SXM2-16GB", 16160, memory_used_mib=9000)])
        assert [g.foreign for g in adapter.inventory(adapter.settings.hosts[1]).gpus] == [
            False, True]
    finally:
        host.set_foreign_processes({})
        host.set_gpus([FakeGpu("Tesla V100-SXM2-16GB", 16160)] * 2)


def test_a_drained_or_unreachable_host_lists_no_offer(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    fleet_env.ledger().drain("gpu-a")
    assert {o.zone for o in adapter.list_offers()} == {"gpu-b", "gpu-c"}
    fleet_env.ledger().undrain("gpu-a")
    entry_port = fleet_env.config()
    entry_port["hosts"][2]["port"] = 1  # nothing listens there
    broken = from_config(entry_port, fleet_env.ssh.folder, fleet_env.ssh.folder)
    assert {o.zone for o in broken.list_offers()} == {"gpu-a", "gpu-b"}
    broken.close()


def test_threads_share_one_connection_per_host(fleet_env: FleetEnv) -> None:
    adapter = fleet_env.provider()
    host = adapter.settings.hosts[0]
    with ThreadPoolExecutor(8) as pool:
        inventories = list(pool.map(lambda _: adapter.inventory(host), range(16)))
    assert all(len(inv.gpus) == 4 for inv in inventories)
    port = fleet_env.ssh.hosts[host.name].port
    mine = [c for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED]
    assert len(mine) == 1

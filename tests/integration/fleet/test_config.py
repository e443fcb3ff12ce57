"""``kind: fleet`` entries through the daemon's provider setup: what is refused, and how."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from providers.fleet.provider import FleetProvider
from scheduler.provider_setup import ProviderConfigError, build_providers


@pytest.fixture
def entry(tmp_path: Path) -> dict:
    key = tmp_path / "id_ed25519"
    key.write_text("not read until a connection is made\n")
    return {"kind": "fleet", "name": "lab", "work_root": "/srv/ga",
            "hosts": [{"name": "box1", "address": "10.0.0.5", "user": "ml",
                       "identity_file": "id_ed25519", "labels": {"site": "office", "rack": "r2"},
                       "gpus": [{"model": "RTX4090", "count": 2}],
                       "cost_per_gpu_hour_usd": 0.22,
                       "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"}]}


def build(entry: dict, base: Path) -> FleetProvider:
    [adapter] = build_providers([entry], base, base)
    assert isinstance(adapter, FleetProvider)
    return adapter


def refused(entry: dict, base: Path) -> str:
    with pytest.raises(ProviderConfigError) as info:
        build_providers([entry], base, base)
    return str(info.value)


def test_a_valid_entry_builds_with_paths_from_the_config_folder(entry, tmp_path) -> None:
    adapter = build(entry, tmp_path)
    host = adapter.settings.hosts[0]
    assert adapter.name == "lab" and host.port == 22 and host.identity_file == tmp_path / "id_ed25519"
    assert (host.site, host.rack, host.cost_per_gpu_hour_usd) == ("office", "r2", 0.22)
    assert adapter.ledger is None  # the daemon hands it one
    adapter.close()


@pytest.mark.parametrize(("change", "expected"), [
    (lambda e: e["hosts"][0].pop("identity_file"), "set identity_file"),
    (lambda e: e["hosts"][0].update(use_agent=True), "not both"),
    (lambda e: e["hosts"][0].update(name="box.1"), "host name"),
    (lambda e: e["hosts"][0].update(port=0), "port"),
    (lambda e: e["hosts"][0].update(cost_per_gpu_hour_usd=-1), "cost_per_gpu_hour_usd"),
    (lambda e: e["hosts"][0]["labels"].update(site="eu/west"), "no '/'"),
    (lambda e: e["hosts"][0].update(host_key="AAAA"), "host_key"),
    (lambda e: e["hosts"][0].update(identity_file="missing_key"), "identity_file"),
    (lambda e: e["hosts"][0].update(gpus=[{"model": "Mystery9000", "count": 1}]), "vram_gib"),
    (lambda e: e["hosts"].append(copy.deepcopy(e["hosts"][0])), "repeated: box1"),
    (lambda e: e.update(hosts=[]), "hosts"),
    (lambda e: e.update(work_root="relative/dir"), "work_root"),
    (lambda e: e.update(agent={"python": "/usr/bin/python3", "pip_spec": "gpu-arbiter"}),
     "exclude each other"),
    (lambda e: e.update(known_hosts="nowhere/known_hosts"), "known_hosts"),
    (lambda e: e["hosts"][0].update(colour="blue"), "colour"),
])
def test_bad_entries_are_refused_naming_the_field(entry, tmp_path, change, expected) -> None:
    change(entry)
    assert expected in refused(entry, tmp_path)


def test_a_host_without_a_trusted_key_is_refused(entry, tmp_path) -> None:
    del entry["hosts"][0]["host_key"]
    assert "no trusted host key" in refused(entry, tmp_path)
    (tmp_path / "known_hosts").write_text(
        "10.0.0.9 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    entry["known_hosts"] = "known_hosts"
    assert "no trusted host key" in refused(entry, tmp_path)  # only another host's key
    (tmp_path / "known_hosts").write_text(
        "10.0.0.5 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    build(entry, tmp_path).close()


@pytest.mark.parametrize("where", ["private_key", "key_passphrase"])
def test_key_material_is_refused_without_its_value(entry, tmp_path, where) -> None:
    entry["hosts"][0][where] = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n"
    message = refused(entry, tmp_path)
    assert f"hosts[0].{where}" in message and "b3BlbnNzaC1rZXktdjE" not in message
    assert "identity_file" in message


def test_a_private_key_pasted_as_host_key_is_refused_without_its_value(entry, tmp_path) -> None:
    entry["hosts"][0]["host_key"] = "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjE"
    message = refused(entry, tmp_path)
    assert "hosts[0].host_key" in message and "b3BlbnNzaC1rZXktdjE" not in message


def test_the_daemon_hands_each_fleet_its_ledger(entry, tmp_path, redis_server) -> None:
    from scheduler.daemon import _hand_slot_ledgers

    second = {**copy.deepcopy(entry), "name": "lab2"}
    adapters = build_providers([entry, second], tmp_path, tmp_path)
    _hand_slot_ledgers(adapters, redis_server.client())
    assert [a.ledger.fleet for a in adapters] == ["lab", "lab2"]
    for adapter in adapters:
        adapter.close()

"""What a host or a fleet file can say that must not break the fleet: a known_hosts line
paramiko cannot parse, huge or repeated command output, a path naming an unset variable.
One real sshd for the module (tests/fixtures/sshd.py); the parsing is tested directly."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from rich.text import Text

from providers.errors import ProviderError, TransientError
from providers.fleet.gpus import SHOWN_CHARS, parse_gpus
from providers.fleet.settings import HostSettings
from providers.fleet.ssh import MAX_OUTPUT_BYTES, HostConnections, HostKeyError
from scheduler.provider_setup import ProviderConfigError, build_providers
from tests.fixtures.sshd import FakeGpu, SshFleet, SshHost, start_sshd_hosts

BAD_LINE = "[127.0.0.1]:1 ssh-ed25519 !!!notbase64"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[SshFleet]:
    fleet = start_sshd_hosts(tmp_path_factory.mktemp("hostile"), {"box": [FakeGpu()]})
    yield fleet
    fleet.stop()


@pytest.fixture
def box(fleet) -> SshHost:
    return fleet.hosts["box"]


def unpinned(fleet: SshFleet, host: SshHost) -> HostSettings:
    """The host trusted through known_hosts only."""
    entry = host.host_settings(fleet.identity_file)
    del entry["host_key"]
    return HostSettings.model_validate(entry)


def entry(fleet: SshFleet, known_hosts: Path) -> dict:
    config = fleet.config("/usr/bin/python3", name="hostile", known_hosts=str(known_hosts))
    for host in config["hosts"]:
        del host["host_key"]
    return config


def test_an_unparsable_known_hosts_line_is_skipped_with_one_warning(fleet, box, tmp_path,
                                                                    caplog) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"# ours\n{BAD_LINE}\n[127.0.0.1]:{box.port} {box.host_key}\n")
    [adapter] = build_providers([entry(fleet, known)], tmp_path, tmp_path)
    adapter.close()
    caplog.set_level(logging.WARNING, logger="providers.fleet.ssh")
    for _ in range(2):  # a new connection each time reads the file again
        ssh = HostConnections("hostile", known, 5)
        assert ssh.run(unpinned(fleet, box), "echo ok", 10).stdout == "ok\n"
        ssh.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"{known}:2" in warnings[0], warnings


def test_an_unparsable_entry_for_the_host_is_named_when_no_key_is_trusted(fleet, box,
                                                                         tmp_path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{box.port} ssh-ed25519 !!!notbase64\n")
    with pytest.raises(ProviderConfigError) as refused:
        build_providers([entry(fleet, known)], tmp_path, tmp_path)
    assert f"{known}:1" in str(refused.value) and "cannot be parsed" in str(refused.value)
    ssh = HostConnections("hostile", known, 5)
    with pytest.raises(HostKeyError) as info:  # a ProviderError, not paramiko's InvalidHostKey
        ssh.run(unpinned(fleet, box), "echo ok", 10)
    assert f"{known}:1" in str(info.value) and info.value.provider == "hostile"


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_command_output_past_the_limit_fails_the_command(fleet, box, stream) -> None:
    ssh = HostConnections("hostile", fleet.known_hosts, 5)
    redirect = "" if stream == "stdout" else " >&2"
    started = time.monotonic()
    with pytest.raises(TransientError) as info:
        ssh.run(unpinned(fleet, box), f"head -c 100000000 /dev/zero | tr '\\0' x{redirect}", 60)
    assert time.monotonic() - started < 10
    assert info.value.code == "OutputTooLarge" and stream in str(info.value)
    assert len(str(info.value)) < 300
    # The connection still serves; output just under the limit is read whole.
    size = MAX_OUTPUT_BYTES - 1
    result = ssh.run(unpinned(fleet, box), f"head -c {size} /dev/zero", 30)
    assert result.status == 0 and len(result.stdout) == size
    ssh.close()


def test_an_echoed_gpu_line_is_cut_in_the_error() -> None:
    with pytest.raises(ValueError) as info:
        parse_gpus("0, " + "x" * 1_000_000 + "\n", "")
    assert len(str(info.value)) < SHOWN_CHARS + 200 and "1000003 characters" in str(info.value)


@pytest.mark.parametrize(("lines", "named"), [
    (["0, GPU-a, NVIDIA GeForce RTX 4090, 24564, 1, 0"] * 3, "index 0"),
    (["0, GPU-a, NVIDIA GeForce RTX 4090, 24564, 1, 0",
      "1, GPU-a, NVIDIA GeForce RTX 4090, 24564, 1, 0"], "uuid 'GPU-a'"),
])
def test_a_gpu_listed_twice_is_a_parse_error_not_a_phantom_gpu(lines, named) -> None:
    with pytest.raises(ValueError, match=f"{named} is listed twice"):
        parse_gpus("\n".join(lines) + "\n", "")


def test_more_gpus_than_a_host_has_slots_for_are_refused() -> None:
    lines = [f"{i}, GPU-{i}, NVIDIA GeForce RTX 4090, 24564, 1, 0\n" for i in range(65)]
    with pytest.raises(ValueError, match="more than 64 GPUs"):
        parse_gpus("".join(lines), "")
    assert len(parse_gpus("".join(lines[:64]), "")) == 64


def test_an_unset_variable_in_a_path_is_named(fleet, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("NOPE_VAR", raising=False)
    config = fleet.config("/usr/bin/python3", name="hostile")
    config["hosts"][0]["identity_file"] = "$NOPE_VAR/id_ed25519"
    with pytest.raises(ProviderConfigError, match=r"\$NOPE_VAR .*is not set"):
        build_providers([config], tmp_path, tmp_path)
    config = fleet.config("/usr/bin/python3", name="hostile", known_hosts="${NOPE_VAR}/kh")
    with pytest.raises(ProviderConfigError, match=r"\$NOPE_VAR .*is not set"):
        build_providers([config], tmp_path, tmp_path)
    monkeypatch.setenv("NOPE_VAR", str(fleet.folder))
    [adapter] = build_providers([fleet.config("/usr/bin/python3", name="hostile",
                                              known_hosts="$NOPE_VAR/known_hosts")],
                                tmp_path, tmp_path)
    adapter.close()


def test_whatever_the_ssh_layer_meets_comes_out_as_a_provider_error(fleet, box,
                                                                    tmp_path) -> None:
    known = tmp_path / "known_hosts"
    known.write_bytes(b"\xff\xfe garbage \x00\n" + f"{BAD_LINE}\n".encode())
    ssh = HostConnections("hostile", known, 5)
    with pytest.raises(ProviderError):
        ssh.run(unpinned(fleet, box), "echo ok", 10)


def test_errors_name_a_host_outside_console_markup(fleet, box, tmp_path) -> None:
    host = unpinned(fleet, box).model_copy(update={"name": "red",
                                                   "host_key": "ssh-ed25519 AAAAC3Nz"})
    with pytest.raises(HostKeyError) as info:  # the pin is not a key
        HostConnections("hostile", None, 5).run(host, "echo ok", 10)
    assert "host red: host_key" in Text.from_markup(str(info.value)).plain


def test_a_hashed_unparsable_entry_is_named_too(fleet, box, tmp_path) -> None:
    hashed = paramiko.HostKeys.hash_host(f"[127.0.0.1]:{box.port}")
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:1 {box.host_key}\n{hashed} ssh-ed25519 !!!notbase64\n")
    with pytest.raises(ProviderConfigError, match=f"{known}:2"):
        build_providers([entry(fleet, known)], tmp_path, tmp_path)


def test_a_command_in_flight_when_the_host_dies_fails_at_once_not_at_its_timeout(
        fleet, box) -> None:
    """A SIGKILLed sshd closes the channel without an exit status: the caller (a reconcile
    pass) must hear "connection lost" then, not after the command's whole timeout."""
    ssh = HostConnections("hostile", None, 5)
    settings = HostSettings.model_validate(box.host_settings(fleet.identity_file))
    assert ssh.run(settings, "echo ok", 10).stdout.strip() == "ok"  # the connection is up
    failed: list[BaseException] = []

    def long_command() -> None:
        try:
            ssh.run(settings, "sleep 60", 60)
        except BaseException as exc:  # noqa: BLE001 - kept for the assertion
            failed.append(exc)

    worker = threading.Thread(target=long_command)
    worker.start()
    time.sleep(1)
    started = time.monotonic()
    try:
        box.kill()
        worker.join(30)
        assert not worker.is_alive(), "run() still waiting on a dead host"
        assert time.monotonic() - started < 15
        [exc] = failed
        assert isinstance(exc, TransientError) and exc.code == "ConnectionLost", exc
    finally:
        box.start()
        worker.join(60)

"""SSH to fleet hosts (paramiko): verified host keys, timeouts, one reused connection per host.

A host's key must match the key pinned in its config, or else an entry of the fleet's
``known_hosts`` file; an unknown or changed key is refused (:class:`HostKeyError`), never
added. Connections are opened on first use and reused by every thread (a paramiko transport
multiplexes channels); one that died is opened again on the next call.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from providers.errors import AuthError, TransientError
from providers.fleet.gpus import short
from providers.fleet.settings import HostSettings

log = logging.getLogger(__name__)

KEEPALIVE_S = 15
# A remote command's stdout, and its stderr, are read up to this many bytes each; more
# fails the command (OutputTooLarge). Our inventory of a busy host is tens of KiB.
MAX_OUTPUT_BYTES = 4 * 1024 * 1024


class HostKeyError(AuthError):
    """The host's key is not the one trusted for it (unknown, or changed)."""


@dataclass(frozen=True)
class Result:
    """A remote command's exit status and output (text, UTF-8 with replacement)."""

    status: int
    stdout: str
    stderr: str


def known_name(host: HostSettings) -> str:
    """``host``'s name in known_hosts: ``address``, or ``[address]:port`` off port 22."""
    # OpenSSH's known_hosts spelling: a port other than 22 goes in brackets.
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


@dataclass(frozen=True)
class SkippedLine:
    """A known_hosts line no key was taken from: ``lineno`` (1-based), its host ``names``
    (plain, or OpenSSH's hashed ``|1|salt|hash``) and ``why``."""

    lineno: int
    names: tuple[str, ...]
    why: str

    def names_host(self, name: str) -> bool:
        return any(n == name or (n.startswith("|1|") and paramiko.HostKeys.hash_host(name, n) == n)
                   for n in self.names)


_warned: set[tuple[str, int, str]] = set()


def read_known_hosts(path: Path) -> tuple[paramiko.HostKeys, list[SkippedLine]]:
    """The keys of an OpenSSH known_hosts file and the lines skipped. A line that cannot be
    parsed (bad base64, a key paramiko cannot read, too few fields, a ``@cert-authority``/
    ``@revoked`` marker, which paramiko does not support) is skipped, as OpenSSH does, with
    one warning per file and line; an unknown key type is skipped quietly. Raises
    ``OSError`` when the file cannot be read."""
    keys = paramiko.HostKeys()
    skipped = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for lineno, raw in enumerate(handle, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            names = tuple(line.split(None, 1)[0].split(","))
            why, quiet = None, False
            if line.startswith("@"):
                why = f"marker {names[0]} is not supported"
                names = tuple(line.split()[1].split(",")) if len(line.split()) > 1 else ()
            else:
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
                except Exception as exc:  # noqa: BLE001 - paramiko raises several kinds per bad line
                    why = f"{type(exc).__name__}: {short(str(exc))}"
                else:
                    if entry is None:
                        fields = line.split()
                        quiet = len(fields) >= 3
                        why = (f"key type {short(fields[1])} is not supported" if quiet
                               else "fewer than 3 fields")
                    else:
                        for name in entry.hostnames:
                            keys.add(name, entry.key.get_name(), entry.key)
            if why is None:
                continue
            skipped.append(SkippedLine(lineno, names, why))
            if not quiet and (str(path), lineno, line) not in _warned:
                _warned.add((str(path), lineno, line))
                log.warning("known_hosts %s:%d skipped, it cannot be parsed: %s",
                            path, lineno, why)
    return keys, skipped


def trusted_keys(host: HostSettings, known_hosts: Path | None) -> paramiko.HostKeys:
    """The keys trusted for ``host``: its pinned key alone, or else the ``known_hosts``
    entries for it. Raises ``ValueError`` for a pinned key paramiko cannot read, and
    :class:`HostKeyError` when ``known_hosts`` is given but cannot be read, or has no
    usable key for the host while an entry for it was skipped (its file:line named)."""
    keys = paramiko.HostKeys()
    name = known_name(host)
    if host.host_key is not None:
        kind, blob = host.host_key.split(" ", 1)
        try:
            keys.add(name, kind, paramiko.PKey.from_type_string(kind, base64.b64decode(blob)))
        except (paramiko.SSHException, ValueError) as exc:
            raise ValueError(f"host {host.name}: host_key: not a readable {kind} key: {exc}") from None
        return keys
    if known_hosts is not None:
        try:
            keys, skipped = read_known_hosts(known_hosts)
        except OSError as exc:
            raise HostKeyError(f"known_hosts {known_hosts} cannot be read: {exc}",
                               code="KnownHostsUnreadable") from None
        bad = [s for s in skipped if s.names_host(name)]
        if keys.lookup(name) is None and bad:
            where = ", ".join(f"{known_hosts}:{s.lineno} ({s.why})" for s in bad[:3])
            raise HostKeyError(
                f"host {host.name} ({name}): no trusted host key: its known_hosts entry "
                f"cannot be parsed: {where}; fix the entry (ssh-keyscan shows the key; check "
                "it out of band) or pin it as host_key", code="KnownHostsEntryUnparsable")
    return keys


class HostConnections:
    """One SSH connection per host, shared by threads.

    ``run(host, command, timeout_s)`` and ``write_file(host, path, text, mode)`` raise
    :class:`HostKeyError` (unknown, changed or unreadable host key), ``AuthError`` (the user
    key was refused) and ``TransientError`` (unreachable, timed out, connection lost, output
    past :data:`MAX_OUTPUT_BYTES`); never a paramiko exception.
    """

    def __init__(self, provider: str, known_hosts: Path | None, connect_timeout_s: float) -> None:
        self.provider = provider
        self.known_hosts = known_hosts
        self.connect_timeout_s = connect_timeout_s
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    def _client(self, host: HostSettings) -> paramiko.SSHClient:
        with self._lock(host.name):
            client = self._clients.get(host.name)
            transport = client.get_transport() if client else None
            if transport is not None and transport.is_active():
                return client
            if client is not None:
                client.close()
                self._clients.pop(host.name, None)
            client = self._connect(host)
            self._clients[host.name] = client
            return client

    def _connect(self, host: HostSettings) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        try:
            trusted = trusted_keys(host, self.known_hosts)
        except ValueError as exc:  # a pinned key paramiko cannot read
            raise HostKeyError(str(exc), provider=self.provider, code="HostKeyUnreadable") from None
        except HostKeyError as exc:
            exc.provider = self.provider
            raise
        for name, entry in trusted.items():
            for kind, key in entry.items():
                client.get_host_keys().add(name, kind, key)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        where = f"{host.user}@{host.address}:{host.port} ({host.name})"
        try:
            client.connect(
                host.address, port=host.port, username=host.user,
                key_filename=str(host.identity_file) if host.identity_file else None,
                allow_agent=host.use_agent, look_for_keys=False,
                timeout=self.connect_timeout_s, banner_timeout=self.connect_timeout_s,
                auth_timeout=self.connect_timeout_s, channel_timeout=self.connect_timeout_s)
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyError(
                f"{where}: host key changed ({exc.key.get_name()} "
                f"{exc.key.fingerprint}); refusing to connect. If the host was reinstalled, "
                "update its entry in known_hosts or its host_key", provider=self.provider,
                code="HostKeyChanged") from None
        except paramiko.AuthenticationException as exc:
            client.close()
            raise AuthError(f"{where}: the user key was refused: {exc}",
                            provider=self.provider, code="AuthFailed") from None
        except paramiko.SSHException as exc:
            client.close()
            if "not found in known_hosts" in str(exc):
                raise HostKeyError(
                    f"{where}: host key unknown; add it to known_hosts "
                    f"({self.known_hosts or 'none configured'}) or pin it as host_key "
                    "(ssh-keyscan shows it; check it out of band)", provider=self.provider,
                    code="HostKeyUnknown") from None
            raise TransientError(f"{where}: {exc}", provider=self.provider,
                                 code="SSHError") from None
        except (OSError, EOFError) as exc:
            client.close()
            raise TransientError(f"{where}: unreachable: {exc}", provider=self.provider,
                                 code="Unreachable") from None
        except Exception as exc:  # noqa: BLE001 - the SSH layer raises only ProviderErrors
            client.close()
            raise TransientError(f"{where}: {type(exc).__name__}: {short(str(exc))}",
                                 provider=self.provider, code="SSHError") from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_S)
        return client

    def _dropped(self, host: HostSettings, exc: BaseException) -> TransientError:
        with self._lock(host.name):
            client = self._clients.pop(host.name, None)
        if client is not None:
            client.close()
        return TransientError(f"{host.name}: connection lost: {short(str(exc)) or type(exc).__name__}",
                              provider=self.provider, code="ConnectionLost")

    def run(self, host: HostSettings, command: str, timeout_s: float) -> Result:
        """Run ``command`` (a shell line for the user's login shell) and wait for it at most
        ``timeout_s`` seconds. Raises as the class docstring says."""
        client = self._client(host)
        try:
            channel = client.get_transport().open_session(timeout=self.connect_timeout_s)
            channel.settimeout(timeout_s)
            channel.exec_command(command)
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout_s
            while True:
                for stream, text in (("stdout", out), ("stderr", err)):
                    if len(text) > MAX_OUTPUT_BYTES:
                        channel.close()
                        raise TransientError(
                            f"{host.name}: command failed: its {stream} passed "
                            f"{MAX_OUTPUT_BYTES // (1024 * 1024)} MiB (the limit); stopped "
                            "reading", provider=self.provider, code="OutputTooLarge")
                if channel.recv_ready():
                    out += channel.recv(65536)
                elif channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                elif channel.exit_status_ready() and channel.eof_received:
                    # The exit status can come before the last output (seen: 4,161,536 of
                    # 4,194,303 bytes read): done only once the server also sent its EOF,
                    # which follows the output, and nothing is left buffered.
                    if channel.recv_ready() or channel.recv_stderr_ready():
                        continue
                    break
                elif channel.closed:
                    # The transport died (the host's sshd is gone): no exit status will
                    # come, so waiting out the timeout would only hold the caller.
                    raise self._dropped(host, EOFError("the connection closed mid-command"))
                elif time.monotonic() > deadline:
                    channel.close()
                    raise TransientError(f"{host.name}: command timed out after {timeout_s:.0f} s",
                                         provider=self.provider, code="Timeout")
                else:
                    time.sleep(0.01)
            status = channel.recv_exit_status()
            channel.close()
        except TransientError:
            raise
        except Exception as exc:  # noqa: BLE001 - paramiko's own, socket errors, a dead transport
            raise self._dropped(host, exc) from None
        return Result(status, out.decode(errors="replace"), err.decode(errors="replace"))

    def write_file(self, host: HostSettings, path: str, text: str, mode: int) -> None:
        """Write ``text`` to ``path`` over SFTP with ``mode`` set before any byte is written
        (secrets never sit readable); replaces the file atomically (``path.tmp`` renamed)."""
        client = self._client(host)
        tmp = f"{path}.tmp"
        try:
            with client.open_sftp() as sftp:
                with sftp.open(tmp, "w") as handle:
                    handle.chmod(mode)
                    handle.write(text.encode())
                sftp.posix_rename(tmp, path)
        except (TimeoutError, ConnectionError, paramiko.SSHException, EOFError) as exc:
            raise self._dropped(host, exc) from None
        except OSError as exc:  # the server refused the file (no such folder, permission)
            raise TransientError(f"{host.name}: writing {path} failed: {exc}",
                                 provider=self.provider, code="WriteFailed") from None

    def forget(self, host: HostSettings) -> None:
        """Close the host's connection (the next call opens a new one)."""
        with self._lock(host.name):
            client = self._clients.pop(host.name, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        with self._guard:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            client.close()

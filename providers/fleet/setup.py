"""``kind: fleet`` in the daemon's ``providers`` list: the entry → :class:`FleetProvider`.

Fields: :class:`providers.fleet.settings.FleetSettings` (its docstring has an example).
Paths (``known_hosts``, each ``identity_file``) may use ``$VAR``/``${VAR}`` and ``~`` and are
relative to the config file. The slot ledger is handed over by the daemon
(:meth:`FleetProvider.use_ledger`), which owns the Redis connection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from providers.base import Provider
from providers.fleet.gpus import configured_gpus
from providers.fleet.provider import FleetProvider
from providers.fleet.settings import FleetSettings
from providers.fleet.ssh import HostKeyError, known_name, trusted_keys

CREDENTIALS_COME_FROM = ("name a key file per host as identity_file (its passphrase, if any, "
                         "from the SSH agent), or set use_agent: true for the SSH agent's keys")


class FleetConfig(FleetSettings):
    """``kind: fleet``: the team's own GPU hosts over SSH; see :class:`FleetSettings`."""

    kind: str


def _pasted_keys(entry: dict[str, Any]) -> list[str]:
    """Fields of ``hosts`` holding a private key's text instead of a path or a public key
    (fields named like key material are refused before this, by the provider setup)."""
    hosts = entry.get("hosts")
    return [f"hosts[{i}].{name}" for i, host in enumerate(hosts if isinstance(hosts, list) else [])
            if isinstance(host, dict) for name in ("identity_file", "host_key")
            if "PRIVATE KEY" in str(host.get(name, ""))]


def from_config(entry: dict[str, Any], base: Path, home: Path) -> Provider:
    """Validate ``entry`` and build the adapter. Raises
    :class:`scheduler.provider_setup.ProviderConfigError` naming the field (a missing key
    file, an unreadable known_hosts or pinned key, key material in the file), or
    ``pydantic.ValidationError``."""
    from providers.replay.market import expand_path
    from scheduler.provider_setup import ProviderConfigError

    material = _pasted_keys(entry)
    if material:
        raise ProviderConfigError(
            f"{', '.join(sorted(material))}: private keys do not belong in the config file "
            f"(value not shown); {CREDENTIALS_COME_FROM}")
    config = FleetConfig.model_validate(entry)
    if config.known_hosts is not None:
        config.known_hosts = expand_path(str(config.known_hosts), base)
        if not config.known_hosts.is_file():
            raise ProviderConfigError(f"known_hosts: {config.known_hosts} is not a file")
    for i, host in enumerate(config.hosts):
        if host.identity_file is not None:
            host.identity_file = expand_path(str(host.identity_file), base)
            if not host.identity_file.is_file():
                raise ProviderConfigError(
                    f"hosts[{i}].identity_file: {host.identity_file} is not a file")
        try:
            trusted = trusted_keys(host, config.known_hosts)
        except (ValueError, HostKeyError) as exc:  # a pin paramiko cannot read; unreadable file
            raise ProviderConfigError(str(exc)) from None
        if trusted.lookup(known_name(host)) is None:
            raise ProviderConfigError(
                f"hosts[{i}] ({host.name}): no trusted host key: pin it as host_key or add "
                f"it to known_hosts ({config.known_hosts or 'none configured'})")
        if host.gpus is not None:
            try:
                configured_gpus(host.gpus)
            except ValueError as exc:
                raise ProviderConfigError(f"hosts[{i}].{exc}") from None
    settings = FleetSettings.model_validate(config.model_dump(exclude={"kind"}))
    return FleetProvider(settings)

"""``kind: fleet`` in the daemon's ``providers`` list: the entry → :class:`FleetProvider`.

Fields: :class:`providers.fleet.settings.FleetSettings` (its docstring has an example).
Paths (``known_hosts``, each ``identity_file``) may use ``$VAR``/``${VAR}`` and ``~`` and are
relative to the config file. The slot ledger is handed over by the daemon
(:meth:`FleetProvider.use_ledger`), which owns the Redis connection.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from providers.base import Provider
from providers.fleet.gpus import configured_gpus
from providers.fleet.provider import FleetProvider
from providers.fleet.settings import FleetSettings
from providers.fleet.ssh import known_name, trusted_keys

CREDENTIALS_COME_FROM = ("name a key file per host as identity_file (its passphrase, if any, "
                         "from the SSH agent), or set use_agent: true for the SSH agent's keys")

# Field names that would carry key material or passphrases (refused without their value).
_KEY_MATERIAL_RE = re.compile(r"private|passphrase|key_data|pkey", re.IGNORECASE)


class FleetConfig(FleetSettings):
    """``kind: fleet``: the team's own GPU hosts over SSH; see :class:`FleetSettings`."""

    kind: str


def _key_material(value: Any, path: str = "") -> list[str]:
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _KEY_MATERIAL_RE.search(key):
                found.append(where)
            found += _key_material(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _key_material(item, f"{path}[{i}]")
    elif isinstance(value, str) and "PRIVATE KEY" in value:
        found.append(path)
    return found


def from_config(entry: dict[str, Any], base: Path, home: Path) -> Provider:
    """Validate ``entry`` and build the adapter. Raises
    :class:`scheduler.provider_setup.ProviderConfigError` naming the field (a missing key
    file, an unreadable known_hosts or pinned key, key material in the file), or
    ``pydantic.ValidationError``."""
    from providers.replay.market import expand_path
    from scheduler.provider_setup import ProviderConfigError

    material = _key_material(entry)
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
        except ValueError as exc:
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

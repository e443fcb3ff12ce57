"""Which provider adapters the daemon runs: the ``providers`` list of its config file
(:mod:`scheduler.daemon_config` reads the file)::

    providers:
      - kind: replay                 # a replayed market (the embedded default)
        market: examples/market.yaml # relative paths are relative to the config file
      - kind: aws                    # (each kind documents its own fields: AwsConfig)
        regions: [us-east-1]
      - kind: catalog                # public catalogs, display/planning only: CatalogConfig
        catalogs: [{provider: gcp, path: "${GA_DATA_DIR}/catalogs/anycloud_2026-05-20/gcp/vms.csv"}]

Every provider name is served by one entry, real sources first: a replayed market imitating
``gcp`` next to a ``gcp`` catalog lists its imitation as ``gcp-replay``; a catalog next to that
cloud's own adapter is listed as ``aws-catalog``; two cloud adapters may not serve one name.

With no config file the daemon runs the replayed example market. Each kind registers a factory
in :data:`FACTORIES`: it receives the entry (a mapping, ``kind`` included), the folder of the
config file and the daemon's home, validates the entry with its own strict model and returns a
:class:`providers.base.Provider`. Invalid entries raise :class:`ProviderConfigError` naming the
entry, the field and the problem.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.config import examples_dir, shared_data_dir
from core.models import StrictModel, format_validation_error
from providers.aliyun.settings import AliyunSettings
from providers.aws.settings import AwsSettings
from providers.base import Provider, Renames
from scheduler.daemon_config import ConfigError

Factory = Callable[[dict[str, Any], Path, Path], Provider]
log = logging.getLogger(__name__)


class ProviderConfigError(ConfigError):
    """A provider entry of the daemon config is invalid, or two entries clash."""


class ReplayConfig(StrictModel):
    """``kind: replay``: a replayed market (``providers/replay``). State under
    ``GA_HOME/replay`` (``GA_HOME/replay-N`` for the N-th further replay entry), or under
    ``state_dir``: replicas sharing one Redis set the same ``state_dir`` so they trade on one
    replayed cloud (one market clock, one instance list). Both paths may use ``$VAR``/
    ``${VAR}`` and ``~``, and are relative to the config file, like catalog paths."""

    kind: str
    market: Path
    state_dir: Path | None = None


def _replay(entry: dict[str, Any], base: Path, home: Path, index: int = 0) -> Provider:
    from providers.replay.market import MarketError, expand_path
    from providers.replay.provider import ReplayProvider

    config = ReplayConfig.model_validate(entry)
    market = expand_path(str(config.market), base)
    if not market.is_file():
        raise ProviderConfigError(f"market: {market} is not a file")
    try:
        state_dir = None if config.state_dir is None else expand_path(str(config.state_dir), base)
        return ReplayProvider(market.resolve(), state_dir
                              or home / ("replay" if index == 0 else f"replay-{index}"))
    except MarketError as exc:
        hint = ""
        if "No such file" in str(exc) and "GA_DATA_DIR" in market.read_text():
            hint = (f"\n(this market reads the shared real-data folder: set GA_DATA_DIR; "
                    f"now {shared_data_dir()})")
        raise ProviderConfigError(f"{exc}{hint}") from None


class AwsConfig(AwsSettings):
    """``kind: aws``: EC2 spot and on-demand GPU offers (``providers/aws``); every other field
    is documented on :class:`providers.aws.settings.AwsSettings`. Credentials come from
    boto3's standard chain, never from this file. The Spot Advisor download is cached under
    ``GA_HOME/aws``. Example::

        - kind: aws
          regions: [us-east-1, us-west-2]
          instance_types: ["g5.*", "p3.*"]
          launch:
            ami: resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id
            subnets: {us-east-1a: subnet-0abc, us-west-2b: subnet-0def}
            security_group_ids: [sg-0123]
    """

    kind: str


# Unknown fields that look like credentials are refused without echoing their value.
_SECRET_FIELD_RE = re.compile(r"secret|password|passphrase|private_key|token|access_key|"
                              r"session_key|api_?key",
                              re.IGNORECASE)


# Where each kind reads its credentials from, told when a config entry carries some.
_CREDENTIALS_COME_FROM = {
    "aws": "use boto3's standard chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
           "~/.aws/credentials with 'profile', SSO or an instance role",
    "aliyun": "set ALIBABA_CLOUD_ACCESS_KEY_ID/ALIBABA_CLOUD_ACCESS_KEY_SECRET in the daemon's "
              "environment, or use ecs_ram_role on ECS",
}


def _secret_like_fields(value: Any, path: str = "") -> list[str]:
    """Paths (``launch.key``, ``catalogs[0].key``) of mapping keys, at any depth of mappings
    and lists, named like credentials (no field of any kind's model is)."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else f"{key}"
            if isinstance(key, str) and _SECRET_FIELD_RE.search(key):
                found.append(where)
            found += _secret_like_fields(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _secret_like_fields(item, f"{path}[{i}]")
    return found


def _refuse_credentials(entry: dict[str, Any]) -> None:
    """Raises :class:`ProviderConfigError` naming the credential-like fields of ``entry``,
    never their values (a model's "unknown field" error would echo them)."""
    secrets = _secret_like_fields(entry)
    if secrets:
        kind = entry.get("kind")
        where = _CREDENTIALS_COME_FROM.get(kind, "this kind needs none")
        if kind in _PACKAGE_KINDS:
            where = importlib.import_module(f"providers.{kind}.setup").CREDENTIALS_COME_FROM
        raise ProviderConfigError(
            f"{', '.join(sorted(secrets))}: credentials do not belong in the config file "
            f"(value not shown); {where}")


def _aws(entry: dict[str, Any], base: Path, home: Path) -> Provider:
    from providers.aws import AwsProvider

    return AwsProvider(AwsConfig.model_validate(entry), home / "aws")


class AliyunConfig(AliyunSettings):
    """``kind: aliyun``: Alibaba Cloud ECS spot and pay-as-you-go GPU offers
    (``providers/aliyun``); every other field is documented on
    :class:`providers.aliyun.settings.AliyunSettings`. Credentials come from the environment
    (``ALIBABA_CLOUD_ACCESS_KEY_ID``/``ALIBABA_CLOUD_ACCESS_KEY_SECRET``, optionally
    ``ALIBABA_CLOUD_SECURITY_TOKEN``) or the ECS instance's RAM role (``ecs_ram_role``), never
    from this file. Prices are converted to USD with ``exchange_rates_usd``. Example::

        - kind: aliyun
          regions: [cn-hangzhou]
          site: china                        # prices in CNY
          exchange_rates_usd: {CNY: 0.1385}  # USD per 1 CNY
          instance_types: ["ecs.gn6i-*", "ecs.gn7*"]
          launch:
            image_id: ubuntu_22_04_x64_20G_alibase_20240130.vhd
            vswitches: {cn-hangzhou-h: vsw-bp1abc, cn-hangzhou-i: vsw-bp1def}
            security_groups: {cn-hangzhou: sg-bp1xyz}
    """

    kind: str


def _aliyun(entry: dict[str, Any], base: Path, home: Path) -> Provider:
    from providers.aliyun import AliyunProvider

    return AliyunProvider(AliyunConfig.model_validate(entry))


def _catalog(entry: dict[str, Any], base: Path, home: Path) -> Provider:
    """``kind: catalog``: public SkyPilot-format catalogs, display and planning only
    (:class:`providers.catalog.provider.CatalogConfig`). Paths may use ``${GA_DATA_DIR}`` and
    are relative to the config file; URL bodies are cached under ``GA_HOME/catalogs``."""
    from providers.catalog.provider import CatalogConfig, CatalogProvider
    from providers.replay.market import expand_path

    config = CatalogConfig.model_validate(entry)
    for spec in config.catalogs:
        if spec.path is not None:
            spec.path = expand_path(str(spec.path), base)
            if not spec.path.is_file():
                raise ProviderConfigError(f"catalogs: {spec.path} is not a file")
    return CatalogProvider(config, home / "catalogs")


def _from_package(kind: str) -> Factory:
    """The factory of a kind whose package builds its own adapter: ``providers.<kind>.setup``
    defines ``from_config(entry, base, home) -> Provider`` (its strict model documents the
    fields) and ``CREDENTIALS_COME_FROM`` (told when an entry carries credentials)."""
    def factory(entry: dict[str, Any], base: Path, home: Path) -> Provider:
        return importlib.import_module(f"providers.{kind}.setup").from_config(entry, base, home)
    return factory


_PACKAGE_KINDS = ("vastai", "azure", "gcp", "fleet")
FACTORIES: dict[str, Factory] = {"replay": _replay, "aws": _aws, "catalog": _catalog,
                                 "aliyun": _aliyun,
                                 **{kind: _from_package(kind) for kind in _PACKAGE_KINDS}}


def default_entries() -> list[dict[str, Any]]:
    return [{"kind": "replay", "market": str(examples_dir() / "market.yaml")}]


def _describe(entry: dict[str, Any]) -> str:
    where = entry.get("market") if entry.get("kind") == "replay" else None
    return f"{entry.get('kind')}" + (f" market {where}" if where else "")


def _separate_names(entries: list[dict[str, Any]], adapters: list[Provider]) -> None:
    """Give every provider name one adapter, real sources first: two cloud adapters under one
    name are refused; a public catalog yields a name a cloud adapter (or an earlier catalog)
    serves, listing its offers as ``<name>-catalog``; a replayed market yields an imitated
    cloud's name to any real source (or an earlier market), as ``<name>-replay``. Each rename
    is logged. Adapters' own ``name`` (poller leases, metrics) is made unique too
    (``catalog-2``). Raises :class:`ProviderConfigError`."""
    from providers.replay.provider import ReplayProvider

    def rank(adapter: Provider) -> int:
        # 0: a real source (keeps its names); 1: display only (catalogs); 2: an imitation.
        if not isinstance(adapter, Renames):
            return 0
        return 2 if isinstance(adapter, ReplayProvider) else 1

    owner: dict[str, int] = {}
    for i, adapter in enumerate(adapters):
        if rank(adapter) != 0:
            continue
        for name in sorted(adapter.provider_names):
            if name in owner:
                j = owner[name]
                raise ProviderConfigError(
                    f"providers[{i}] ({_describe(entries[i])}) and providers[{j}] "
                    f"({_describe(entries[j])}) both serve provider {name!r}: their offers and "
                    "instances would be mixed up; keep one")
            owner[name] = i
    taken = set(owner)
    for level, what in ((1, "display only"), (2, "a replayed market's imitation")):
        for i, adapter in enumerate(adapters):
            if rank(adapter) == level and isinstance(adapter, Renames):
                for name, label in adapter.avoid_names(taken).items():
                    log.info("providers[%d] (%s): provider %r is also served by another entry "
                             "(a real source first); this entry's offers are listed as %r (%s)",
                             i, _describe(entries[i]), name, label, what)
                taken |= adapter.provider_names
    seen: set[str] = set()
    for adapter in adapters:
        name, n = adapter.name, 2
        while name in seen:
            name, n = f"{adapter.name}-{n}", n + 1
        if name != adapter.name:
            adapter.name = name
        seen.add(name)


def build_providers(entries: list[dict[str, Any]], base: Path, home: Path) -> list[Provider]:
    """One adapter per entry, in order, each provider name served by one of them (see
    :func:`_separate_names`). Raises :class:`ProviderConfigError`."""
    out: list[Provider] = []
    replay_index = 0
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "kind" not in entry:
            raise ProviderConfigError(f"providers[{i}]: needs a 'kind' "
                                      f"(one of {', '.join(sorted(FACTORIES))})")
        kind = entry["kind"]
        factory = FACTORIES.get(kind)
        if factory is None:
            raise ProviderConfigError(f"providers[{i}].kind: got {kind!r}; allowed: "
                                      f"{', '.join(sorted(FACTORIES))}")
        try:
            _refuse_credentials(entry)
            if kind == "replay":
                out.append(_replay(entry, base, home, replay_index))
                replay_index += 1
            else:
                out.append(factory(entry, base, home))
        except ValidationError as exc:
            lines = format_validation_error(exc).splitlines()
            raise ProviderConfigError("\n".join(f"providers[{i}] ({kind}): {ln}" for ln in lines)) from None
        except ProviderConfigError as exc:
            raise ProviderConfigError(f"providers[{i}] ({kind}): {exc}") from None
    try:
        _separate_names(entries, out)
    except ProviderConfigError:
        for adapter in out:
            adapter.close()
        raise
    return out

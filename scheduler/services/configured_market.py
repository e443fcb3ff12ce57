"""The configured providers and what they list now, for commands that run without a daemon
(``schedctl plan``, ``schedctl providers check``).

The providers are resolved as ``schedctl daemon`` resolves them: ``--config PATH``, else
``GA_HOME/config.yaml`` when it exists, else the replayed example market
(:func:`scheduler.provider_setup.default_entries`), built with the daemon's home so that a
replayed market reads the same market clock (``GA_HOME/replay``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from providers.base import Compute
from providers.errors import ProviderError
from providers.replay import ReplayProvider
from scheduler.controller.context import ProviderRegistry
from core.models import Offer
from scheduler.poller.offers import with_observed_risk
from scheduler.daemon_config import load_config_file
from scheduler.provider_setup import ProviderConfigError, build_providers, default_entries
from scheduler.store import Store

log = logging.getLogger(__name__)


def config_entries(home: Path, config: Path | None = None) -> tuple[list[dict[str, Any]], Path]:
    """The provider entries and the folder their relative paths start from: ``config``, else
    ``home/config.yaml`` when it is a file, else the default entries (relative to ``home``).
    Raises ``scheduler.daemon_config.ConfigError``."""
    path = config or (home / "config.yaml" if (home / "config.yaml").is_file() else None)
    if path is None:
        return default_entries(), home
    return load_config_file(path), path.resolve().parent


@contextmanager
def configured_providers(home: Path, config: Path | None = None) -> Iterator[ProviderRegistry]:
    """The configured adapters (see :func:`config_entries`), closed on exit (a replayed
    market's cloud process is never started by building them). Raises
    ``scheduler.daemon_config.ConfigError`` (``ProviderConfigError`` for a bad entry, also
    when two adapters serve one provider name)."""

    entries, base = config_entries(home, config)
    adapters = build_providers(entries, base, home)
    try:
        try:
            registry = ProviderRegistry(adapters)
        except ValueError as exc:
            raise ProviderConfigError(str(exc)) from None
        yield registry
    finally:
        for adapter in adapters:
            adapter.close()


def offers_now(store: Store, providers: ProviderRegistry) -> tuple[list[Offer], list[str]]:
    """What each launchable adapter lists now, its spot offers' interruption risk blended with
    the preemptions this service observed (as the poller stores them), and one line per adapter
    that failed. A replayed market is read from its market file at its clock without starting
    its cloud (``offers_now``); display-only sources (public catalogs) are skipped: nothing is
    ever placed on them. Raises ``redis.RedisError``."""
    offers: list[Offer] = []
    problems: list[str] = []
    exposure = store.offers.spot_exposure()
    for adapter in providers.adapters():
        if not isinstance(adapter, Compute):
            continue
        listing = adapter.offers_now if isinstance(adapter, ReplayProvider) else adapter.list_offers
        try:
            listed = listing()
        except ProviderError as exc:
            log.warning("listing offers of %s failed: %s", adapter.name, exc)
            problems.append(f"{adapter.name}: {exc}")
            continue
        offers.extend(with_observed_risk(o, exposure) for o in listed)
    return offers, problems

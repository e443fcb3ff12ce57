"""Public catalogs as a provider: real offers of many clouds with no credentials, for display
and planning. A catalog provider is a :class:`providers.base.Provider` but not a
:class:`~providers.base.Compute`: it cannot launch anything, and the scheduler places nothing
on its offers.

Each configured catalog (a SkyPilot ``vms.csv`` at a path or URL) gives one spot offer and one
on-demand offer per GPU configuration and location it prices; the offers carry the catalog's
provider name (``aws``, ``gcp``, ``azure``, ``lambda``, ``vast``, or any name given). When
that cloud's own adapter (or an earlier catalog) also serves the name, the catalog's offers
are listed as ``<name>-catalog`` instead (:meth:`CatalogProvider.avoid_names`), so
display-only offers never mix with offers that launch; a replayed market imitating the cloud
yields the name to the catalog (see :func:`scheduler.provider_setup.build_providers`). Spot
offers are unrated (interruption risk ``None``: catalogs carry none), so the scheduler's one
prior for unrated spot offers applies, unless ``default_spot_risk`` is configured.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from pydantic import Field, model_validator

from core.models import Market, Offer, PriceObservation, StrictModel
from providers.base import Checked, CheckResult, Provider, Renames
from providers.catalog.fetch import CATALOG_MAX_AGE_S, CatalogFetcher, Fetched, is_url, redacted
from providers.catalog.reader import CatalogEntry, CatalogRead, machine_of, parse_catalog
from providers.errors import ProviderError

log = logging.getLogger(__name__)

class CatalogSpec(StrictModel):
    """One catalog: ``provider`` (the offers' provider name) and exactly one of ``path`` or
    ``url``."""

    provider: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    path: Path | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _one_location(self) -> CatalogSpec:
        if (self.path is None) == (self.url is None):
            raise ValueError("give exactly one of 'path' or 'url'")
        # Checked here, not by a field pattern, so the error shows the entry as {...}: a URL
        # may carry a password or token.
        if self.url is not None and not is_url(self.url):
            raise ValueError("url: must start with http:// or https://")
        return self


class CatalogConfig(StrictModel):
    """``kind: catalog`` in the daemon config::

        - kind: catalog
          catalogs:
            - {provider: gcp, path: "${GA_DATA_DIR}/catalogs/anycloud_2026-05-20/gcp/vms.csv"}
            - {provider: lambda, url: https://example.org/lambda/vms.csv}
          max_age_s: 3600          # URL bodies are revalidated at most this often
          default_spot_risk: 0.2   # optional: interruption risk given to spot offers
    """

    kind: str
    catalogs: list[CatalogSpec] = Field(min_length=1)
    max_age_s: float = Field(default=CATALOG_MAX_AGE_S, ge=0)
    default_spot_risk: float | None = Field(default=None, ge=0, le=1)


def offers_from_entries(provider: str, entries: list[CatalogEntry], observed_at: datetime,
                        spot_risk: float | None) -> list[Offer]:
    """Pure: catalog entries → offers (on-demand and spot per entry, when priced); spot offers
    get ``spot_risk`` as interruption risk (``None``: unrated)."""
    out = []
    for e in entries:
        common = dict(provider=provider, **machine_of(e), observed_at=observed_at,
                      on_demand_price_usd_per_hour=e.on_demand_price_usd_per_hour)
        if e.on_demand_price_usd_per_hour is not None:
            out.append(Offer(market=Market.ON_DEMAND,
                             price_usd_per_hour=e.on_demand_price_usd_per_hour, **common))
        if e.spot_price_usd_per_hour is not None:
            out.append(Offer(market=Market.SPOT, price_usd_per_hour=e.spot_price_usd_per_hour,
                             interruption_risk=spot_risk, **common))
    return out


class CatalogProvider(Provider, Checked, Renames):
    """The :class:`providers.base.Provider` over public catalogs; ``check`` reads each one,
    ``avoid_names`` lists a catalog under ``<name>-catalog`` beside a cloud's own adapter.

    Args:
        config: the validated :class:`CatalogConfig` (relative paths already resolved).
        cache_dir: where URL bodies are cached (``GA_HOME/catalogs``).
        fetcher: a :class:`CatalogFetcher` to use (tests); default one over ``cache_dir``.
    """

    name = "catalog"

    def __init__(self, config: CatalogConfig, cache_dir: Path,
                 fetcher: CatalogFetcher | None = None) -> None:
        self.config = config
        # The provider name each catalog's offers carry: its ``provider``, unless renamed by
        # avoid_names.
        self.labels = {c.provider: c.provider for c in config.catalogs}
        self._fetcher = fetcher or CatalogFetcher(cache_dir, config.max_age_s)
        self._last: dict[int, tuple[Fetched, CatalogRead]] = {}

    @property
    def provider_names(self) -> frozenset[str]:
        """The name each catalog's offers carry (``renamed`` ones under their new name)."""
        return frozenset(self.labels.values())

    @property
    def renamed(self) -> dict[str, str]:
        """``{configured name: name shown}`` of the catalogs :meth:`avoid_names` renamed."""
        return {n: label for n, label in self.labels.items() if label != n}

    def avoid_names(self, taken: set[str]) -> dict[str, str]:
        """List the offers of each catalog whose provider name is in ``taken`` (served by
        another adapter) as ``<name>-catalog`` (``<name>-catalog-2``, ... if that is taken
        too). Returns ``{configured name: label}`` of the catalogs renamed."""
        renamed = {}
        for name in sorted(self.labels):
            if name not in taken:
                continue
            label, n = f"{name}-catalog", 2
            while label in taken or label in self.labels:
                label, n = f"{name}-catalog-{n}", n + 1
            self.labels[name] = renamed[name] = label
        return renamed

    def _location(self, spec: CatalogSpec) -> str:
        """What is fetched; shown only as :func:`~providers.catalog.fetch.redacted`."""
        return spec.url if spec.url is not None else str(spec.path)

    def _read(self, index: int, spec: CatalogSpec) -> tuple[Fetched, CatalogRead]:
        fetched = self._fetcher.fetch(self._location(spec))
        last = self._last.get(index)
        if last is not None and last[0].text == fetched.text:
            read = last[1]
        else:
            try:
                read = parse_catalog(fetched.text, fetched.location)
            except ValueError as exc:
                raise ProviderError(str(exc), provider=self.labels[spec.provider]) from None
        self._last[index] = (fetched, read)
        return fetched, read

    def _list_offers(self) -> list[Offer]:
        """Offers of every catalog that can be read. A catalog that cannot be read (no cached
        copy either) or is malformed gives the offers of its last good read in this process,
        or none, with a WARNING: one unreachable URL does not hide the other catalogs. Raises
        the first catalog's ``TransientError``/``NotFoundError``/``ProviderError`` only when no
        catalog can be read at all."""
        out: list[Offer] = []
        errors: list[ProviderError] = []
        for i, spec in enumerate(self.config.catalogs):
            try:
                fetched, read = self._read(i, spec)
            except ProviderError as exc:
                errors.append(exc)
                if i not in self._last:
                    log.warning("catalog %s skipped: %s", redacted(self._location(spec)), exc)
                    continue
                log.warning("catalog %s: keeping its last read: %s", redacted(self._location(spec)),
                            exc)
                fetched, read = self._last[i]
            if fetched.stale_error:
                log.warning("catalog %s: using the cached copy (%.0f s old): %s",
                            fetched.location, fetched.age_s(), fetched.stale_error)
            out += offers_from_entries(self.labels[spec.provider], read.entries,
                                       fetched.fetched_at, self.config.default_spot_risk)
        if errors and len(errors) == len(self.config.catalogs):
            raise errors[0]
        return out

    def _poll_prices(self, since: datetime | None) -> list[PriceObservation]:
        """One observation per offer, at the time its catalog was read from its origin; none
        for a catalog not refreshed since ``since``."""
        out = []
        for offer in self._list_offers():
            if since is None or offer.observed_at > since:
                out.append(PriceObservation(series=offer.key.series(), observed_at=offer.observed_at,
                                            price_usd_per_hour=offer.price_usd_per_hour))
        return out

    def check(self) -> list[CheckResult]:
        """Per catalog: can it be read, how old is it, how many offers did it give."""
        rows = []
        for i, spec in enumerate(self.config.catalogs):
            where = redacted(self._location(spec))
            try:
                fetched, read = self._read(i, spec)
            except ProviderError as exc:
                rows.append(CheckResult(self.labels[spec.provider], "-", f"catalog {where}",
                                        False, str(exc)))
                continue
            age_h = fetched.age_s() / 3600
            detail = f"{read.summary()}; {age_h:.1f} h old" + (
                " (cached)" if fetched.from_cache else "")
            if fetched.stale_error:
                detail += f"; refresh failed: {fetched.stale_error}"
            if self.labels[spec.provider] != spec.provider:
                detail += (f"; listed as {self.labels[spec.provider]}: another adapter serves "
                           f"{spec.provider!r}")
            rows.append(CheckResult(self.labels[spec.provider], "-", f"catalog {where}", True,
                                    detail))
        return rows

    def close(self) -> None:
        self._fetcher.close()

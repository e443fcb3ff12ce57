"""A replayed spot market loaded from a market file (schema: :mod:`providers.replay.schema`).

:func:`load_market` reads the YAML, resolves paths, reads catalogs and traces, and returns a
:class:`ReplayMarket`: the offers, and for each spot offer whether it is available and what it
costs at any market time. Nothing here does I/O after loading and nothing reads a clock; callers
pass market time (see :class:`providers.replay.timeline.MarketClock`).

Paths in the file go through ``$VAR``/``${VAR}`` expansion (``GA_DATA_DIR`` defaults to
:func:`core.config.shared_data_dir`), then ``~``, then are taken relative to the market
file's folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml
from pydantic import ValidationError

from providers.catalog.reader import CatalogEntry, GpuMachine, machine_of, parse_catalog, slug
from providers.replay.schema import (
    DEFAULT_NOTICE_STYLES,
    CatalogSpec,
    MarketSpec,
    NoticeSpec,
    OfferSpec,
    TraceFileSpec,
)
from providers.replay.timeline import (
    AvailabilityTrace,
    MarketClock,
    PriceSeries,
    TraceError,
    load_trace,
)
from core.config import shared_data_dir
from core.models import Market, Offer, OfferKey, PriceObservation
from core.models.errors import describe_validation_error

_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")


class MarketError(ValueError):
    """The market file is invalid; the message names the file and the field."""


@dataclass(frozen=True)
class Notice:
    """How a reclaimed spot instance is warned: ``style`` (``aws`` | ``aliyun`` | ``azure`` |
    ``gcp`` | ``none``, the agent's metadata flavor) and ``seconds`` of wall time from the
    notice to the reclaim (0 for ``none``: the instance just stops)."""

    style: str
    seconds: float


def default_notice(provider: str, notice_seconds: float) -> Notice:
    """The notice of an offer of ``provider`` whose market file names none: the imitated
    cloud's style (:data:`~providers.replay.schema.DEFAULT_NOTICE_STYLES`, else ``aws``), the
    market's ``notice_seconds``."""
    return resolve_notice(None, provider, notice_seconds)


def resolve_notice(spec: NoticeSpec | None, provider: str, notice_seconds: float) -> Notice:
    """``spec`` with its defaults filled in (see :func:`default_notice`)."""
    style = spec.style if spec else DEFAULT_NOTICE_STYLES.get(provider, "aws")
    if style == "none":
        return Notice("none", 0.0)
    seconds = spec.seconds if spec is not None and spec.seconds is not None else notice_seconds
    return Notice(style, seconds)


@dataclass
class ReplayOffer(GpuMachine):
    """One instance type in one zone (:class:`GpuMachine`) of ``provider``, with its on-demand
    and/or spot market.

    Prices are USD/hour. ``trace`` (spot only) counts the spot instances available over
    market time; ``None`` means always available, unbounded. ``spot_prices`` is the spot price
    over market time. ``interruption_risk`` is the spot market's: the file's value, else
    derived from the trace, else 0. ``speed`` is how fast jobs run on it relative to the host
    (exported to them as ``SCHED_REPLAY_SPEED``). ``instances`` caps each market at that many
    instances at once (``None``: no cap); ``boot_failures`` is how many first launches of each
    market never boot (see :mod:`providers.replay.schema`).
    """

    provider: str
    on_demand_price_usd_per_hour: float | None
    spot_prices: PriceSeries | None
    interruption_risk: float | None = None
    trace: AvailabilityTrace | None = None
    notice: Notice | None = None
    speed: float = 1.0
    instances: int | None = None
    boot_failures: int = 0

    def key(self, market: Market) -> OfferKey:
        """The offer key of this offer in ``market``."""
        return OfferKey(provider=self.provider, region=self.region, zone=self.zone,
                        instance_type=self.instance_type, market=market)

    def markets(self) -> list[Market]:
        """The markets this offer is sold in (on-demand first)."""
        out = []
        if self.on_demand_price_usd_per_hour is not None:
            out.append(Market.ON_DEMAND)
        if self.spot_prices is not None:
            out.append(Market.SPOT)
        return out

    def price_at(self, market: Market, market_s: float) -> float:
        """USD/hour in ``market`` at market time ``market_s``."""
        if market is Market.SPOT:
            assert self.spot_prices is not None
            return self.spot_prices.price_at(market_s)
        assert self.on_demand_price_usd_per_hour is not None
        return self.on_demand_price_usd_per_hour

    def spot_risk(self) -> float:
        """The spot market's interruption risk: the file's value, else the trace's, else 0."""
        if self.interruption_risk is not None:
            return self.interruption_risk
        return self.trace.interruption_risk() if self.trace else 0.0

    def capacity_limit(self, market: Market, market_s: float) -> int | None:
        """How many instances ``market`` can run at once at ``market_s``: the spot trace's
        count, ``instances``, the smaller of both, or ``None`` (unbounded) with neither. A
        0/1 availability trace bounds spot only where it reads 0 (no capacity); its 1s leave
        the count to ``instances`` (:attr:`AvailabilityTrace.counts_instances`)."""
        bounds = [self.instances] if self.instances is not None else []
        if market is Market.SPOT and self.trace is not None:
            count = self.trace.count_at(market_s)
            if count == 0 or self.trace.counts_instances:
                bounds.append(count)
        return min(bounds) if bounds else None

    def to_offer(self, market: Market, market_s: float, observed_at: datetime,
                 running: int = 0) -> Offer:
        """The :class:`Offer` for ``market`` at market time ``market_s``, while ``running``
        of its instances are not yet terminated: ``capacity`` is
        :meth:`capacity_limit` minus ``running`` (never below 0), ``None`` when unbounded."""
        limit = self.capacity_limit(market, market_s)
        return Offer(
            provider=self.provider, **machine_of(self), market=market,
            price_usd_per_hour=self.price_at(market, market_s),
            on_demand_price_usd_per_hour=self.on_demand_price_usd_per_hour,
            interruption_risk=self.spot_risk() if market is Market.SPOT else 0.0,
            interruption_notice_s=self.notice.seconds
            if market is Market.SPOT and self.notice is not None else None,
            observed_at=observed_at,
            capacity=None if limit is None else max(0, limit - running),
        )


@dataclass
class ReplayMarket:
    """A loaded market. ``time_scale``: market s per wall s; ``notice_seconds``: wall seconds
    from notice to reclaim; ``start_offset_hours``: market time at the clock's epoch;
    ``agent_start_timeout_s``: how long the scheduler waits for an agent's first report
    (``None``: the provider's default)."""

    name: str
    path: Path
    time_scale: float
    notice_seconds: float
    start_offset_hours: float
    offers: list[ReplayOffer]
    agent_start_timeout_s: float | None = None
    _by_key: dict[OfferKey, ReplayOffer] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for offer in self.offers:
            for market in offer.markets():
                self._by_key[offer.key(market)] = offer

    @property
    def start_market_s(self) -> float:
        """Market seconds at the clock's epoch."""
        return self.start_offset_hours * 3600.0

    @property
    def provider_names(self) -> set[str]:
        """Every ``provider`` value used by this market's offers."""
        return {offer.provider for offer in self.offers}

    def clock(self, epoch_wall: datetime) -> MarketClock:
        """The market clock that reads ``start_offset_hours`` at ``epoch_wall``."""
        return MarketClock(epoch_wall, self.start_market_s, self.time_scale)

    def find(self, key: OfferKey) -> ReplayOffer | None:
        """The offer sold under ``key``, or ``None``."""
        return self._by_key.get(key)

    def notice_of(self, offer: ReplayOffer) -> Notice:
        """How a reclaimed spot instance of ``offer`` is warned (its own notice, else
        :func:`default_notice`)."""
        return offer.notice or default_notice(offer.provider, self.notice_seconds)

    def unavailable_reason(self, key: OfferKey, market_s: float) -> str | None:
        """Why ``key`` cannot be launched at ``market_s`` whatever runs there (unknown offer,
        spot trace at 0; a full offer is :meth:`capacity_left`'s), or ``None``."""
        offer = self.find(key)
        if offer is None:
            return f"unknown offer {key.series()}"
        if key.market is Market.SPOT and offer.trace and not offer.trace.is_available(market_s):
            return "spot capacity reclaimed (availability trace reads 0)"
        return None

    def capacity_limit(self, key: OfferKey, market_s: float) -> int | None:
        """How many instances of ``key`` can run at once at ``market_s``
        (:meth:`ReplayOffer.capacity_limit`); ``None`` when unbounded or the offer unknown."""
        offer = self.find(key)
        return offer.capacity_limit(key.market, market_s) if offer is not None else None

    def capacity_left(self, key: OfferKey, market_s: float, running: int) -> int | None:
        """Instances of ``key`` launchable at ``market_s`` while ``running`` of its instances
        are not yet terminated (never below 0); ``None`` when unbounded or unknown."""
        limit = self.capacity_limit(key, market_s)
        return None if limit is None else max(0, limit - running)

    def offers_at(self, market_s: float, observed_at: datetime,
                  running: Mapping[OfferKey, int] | None = None) -> list[Offer]:
        """Offers rentable at ``market_s``: spot offers whose trace reads 0 are left out; each
        carries its ``capacity`` given ``running`` (offer key → instances not yet terminated;
        none when omitted). A full offer is listed, with capacity 0."""
        running = running or {}
        out = []
        for offer in self.offers:
            for market in offer.markets():
                key = offer.key(market)
                if self.unavailable_reason(key, market_s) is None:
                    out.append(offer.to_offer(market, market_s, observed_at,
                                              running.get(key, 0)))
        return out

    def price_observations(
        self, clock: MarketClock, since: datetime | None, now: datetime
    ) -> list[PriceObservation]:
        """Price changes in the wall window ``(since, now]``, oldest first.

        The replay's price history is the step function itself: each offer (on-demand and spot)
        has one observation at the epoch with the price then in force, and each spot price step
        whose market time passes in the window is one more, stamped with the wall time at which
        the market clock reached it. ``since=None`` means from the epoch on.
        """
        start_s = clock.start_market_s
        after_s = start_s if since is None else max(start_s, clock.market_s(since))
        until_s = clock.market_s(now)
        include_opening = since is None or since < clock.epoch_wall
        out: list[PriceObservation] = []
        for offer in self.offers:
            for market in offer.markets():
                series = offer.key(market).series()
                if include_opening:
                    out.append(PriceObservation(
                        series=series, observed_at=clock.epoch_wall,
                        price_usd_per_hour=offer.price_at(market, start_s)))
                if market is Market.SPOT and offer.spot_prices is not None:
                    for at_s, price in offer.spot_prices.steps_between(after_s, until_s):
                        out.append(PriceObservation(series=series, observed_at=clock.wall_at(at_s),
                                                    price_usd_per_hour=price))
        out.sort(key=lambda obs: obs.observed_at)
        return out


def expand_path(raw: str, base_dir: Path) -> Path:
    """Expand ``$VAR``/``${VAR}`` (unknown variables stay as written; ``GA_DATA_DIR`` defaults to
    the shared data folder) and ``~``; a relative result is taken from ``base_dir``."""
    env = dict(os.environ)
    env.setdefault("GA_DATA_DIR", str(shared_data_dir()))

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return env.get(name, match.group(0))

    path = Path(_VAR.sub(sub, raw)).expanduser()
    return path if path.is_absolute() else base_dir / path


def _format_validation(path: Path, error: ValidationError) -> str:
    lines = []
    for problem in describe_validation_error(error):
        text = problem["problem"]
        if text.startswith("unknown field"):
            text = "unknown field (check the spelling; see providers/replay/schema.py)"
        value = problem["value"]
        shown = "{...}" if isinstance(value, dict) else repr(value)
        lines.append(f"{path}: {problem['field']}: got {shown[:80]}; {text}")
    return "\n".join(lines)


def _offer_from_spec(spec: OfferSpec, notice_seconds: float) -> ReplayOffer:
    spot = None
    if spec.spot_price_usd_per_hour is not None:
        points = tuple((p.at_hours * 3600.0, p.price) for p in spec.spot_price_series)
        spot = PriceSeries(spec.spot_price_usd_per_hour, points)
    return ReplayOffer(
        provider=spec.provider, **machine_of(spec),
        on_demand_price_usd_per_hour=spec.on_demand_price_usd_per_hour, spot_prices=spot,
        interruption_risk=spec.interruption_risk,
        notice=resolve_notice(spec.notice, spec.provider, notice_seconds), speed=spec.speed,
        instances=spec.instances, boot_failures=spec.boot_failures,
    )


def _offer_from_entry(entry: CatalogEntry, provider: str, notice: Notice,
                      speed: float) -> ReplayOffer:
    spot = None
    if entry.spot_price_usd_per_hour is not None:
        spot = PriceSeries(entry.spot_price_usd_per_hour)
    return ReplayOffer(provider=provider, **machine_of(entry), spot_prices=spot,
                       on_demand_price_usd_per_hour=entry.on_demand_price_usd_per_hour,
                       notice=notice, speed=speed)


def _kept(entry: CatalogEntry, spec: CatalogSpec) -> bool:
    """Whether ``entry`` passes the catalog's filters (names compared as the reader spells
    them: :func:`providers.catalog.reader.slug`)."""
    return all(wanted is None or value in {slug(w) for w in wanted} for value, wanted in (
        (entry.instance_type, spec.instance_types), (entry.region, spec.regions),
        (entry.zone, spec.zones)))


def _catalog_offers(spec: CatalogSpec, field_name: str, market_path: Path,
                    notice_seconds: float) -> list[ReplayOffer]:
    """The offers of one ``catalogs:`` item: the GPU rows its filters keep, duplicates merged
    (:func:`providers.catalog.reader.parse_catalog`). Raises ``MarketError``."""
    path = expand_path(spec.path, market_path.parent)
    try:
        read = parse_catalog(path.read_text(), str(path))
    except OSError as exc:
        raise MarketError(f"{market_path}: {field_name}.path: {path}: cannot open catalog: "
                          f"{exc.strerror or exc}") from None
    except ValueError as exc:
        raise MarketError(f"{market_path}: {field_name}.path: {exc}") from None
    entries = [e for e in read.entries if _kept(e, spec)]
    if not entries:
        raise MarketError(f"{market_path}: {field_name}: the filters keep no GPU row of "
                          f"{spec.path}")
    notice = resolve_notice(spec.notice, spec.provider, notice_seconds)
    return [_offer_from_entry(e, spec.provider, notice, spec.speed) for e in entries]


class _TraceCache:
    """Loads each trace file once per market load and turns trace errors into field errors."""

    def __init__(self, market_path: Path) -> None:
        self.market_path = market_path
        self.base_dir = market_path.parent
        self._loaded: dict[tuple[Path, str | None, float | None], AvailabilityTrace] = {}

    def get(self, raw: str | TraceFileSpec, field_name: str, time_unit: str | None = None,
            gap_seconds: float | None = None) -> AvailabilityTrace:
        if isinstance(raw, TraceFileSpec):
            raw, time_unit, gap_seconds = raw.path, raw.time_unit, raw.gap_seconds
        path = expand_path(raw, self.base_dir)
        cache_key = (path, time_unit, gap_seconds)
        if cache_key not in self._loaded:
            try:
                self._loaded[cache_key] = load_trace(path, time_unit=time_unit,
                                                     gap_seconds=gap_seconds)
            except TraceError as exc:
                raise MarketError(f"{self.market_path}: {field_name}: {exc}") from None
        return self._loaded[cache_key]


def _build_offers(spec: MarketSpec, path: Path) -> list[ReplayOffer]:
    traces = _TraceCache(path)
    offers: list[ReplayOffer] = []
    for i, offer_spec in enumerate(spec.offers):
        offer = _offer_from_spec(offer_spec, spec.notice_seconds)
        if offer_spec.availability_trace:
            offer.trace = traces.get(offer_spec.availability_trace,
                                     f"offers[{i}].availability_trace")
        offers.append(offer)
    for i, cat in enumerate(spec.catalogs):
        offers.extend(_catalog_offers(cat, f"catalogs[{i}]", path, spec.notice_seconds))
    for i, trace_spec in enumerate(spec.traces):
        matched = [
            o for o in offers
            if o.instance_type == trace_spec.instance_type and o.zone == trace_spec.zone
            and o.spot_prices is not None
            and (trace_spec.provider is None or o.provider == trace_spec.provider)
        ]
        if not matched:
            raise MarketError(
                f"{path}: traces[{i}]: no spot offer has instance_type "
                f"{trace_spec.instance_type!r} in zone {trace_spec.zone!r}"
            )
        trace = traces.get(trace_spec.path, f"traces[{i}].path", trace_spec.time_unit,
                           trace_spec.gap_seconds)
        for offer in matched:
            if offer.trace is None:
                offer.trace = trace
    return offers


def load_market(path: str | Path) -> ReplayMarket:
    """Load and validate a market file (YAML; schema in :mod:`providers.replay.schema`).

    Reads the catalogs and traces it names. Raises ``MarketError`` naming the file and the
    field when the file is missing, not YAML, fails validation, names a missing or malformed
    catalog or trace, or defines the same offer key twice.
    """
    path = Path(path).resolve()
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise MarketError(f"{path}: cannot read market file: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise MarketError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise MarketError(f"{path}: a market file is a mapping with name, offers, ...")
    try:
        spec = MarketSpec.model_validate(raw)
    except ValidationError as exc:
        raise MarketError(_format_validation(path, exc)) from None
    offers = _build_offers(spec, path)
    seen: set[OfferKey] = set()
    for offer in offers:
        for market in offer.markets():
            key = offer.key(market)
            if key in seen:
                raise MarketError(f"{path}: offer {key.series()} is defined twice")
            seen.add(key)
    return ReplayMarket(
        name=spec.name, path=path, time_scale=spec.time_scale,
        notice_seconds=spec.notice_seconds, start_offset_hours=spec.start_offset_hours,
        offers=offers, agent_start_timeout_s=spec.agent_start_timeout_s,
    )

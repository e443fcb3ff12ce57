"""A replayed market as arrays over simulator ticks: what the policies see at every tick.

Built from a :class:`providers.replay.market.ReplayMarket` (the same market files the replay
provider serves, loaded with :func:`providers.replay.market.load_market`) and a job spec: the
offers the spec admits (:func:`policies.constraints.filter_offers`), then per absolute tick
``k`` (market seconds ``[k·g, (k+1)·g)``) their availability (trace at the tick's start,
**1 = available**), their price (spot price series) and the run statistics of their past
availability (:func:`policies.availability.availability_stats`, samples ``0..k`` only).

Policies see only the past: the statistics at tick ``k`` use samples ``0..k`` (``k`` is the
decision time's own sample, which the policy sees anyway), and an offer's interruption risk
(when the market file gives none) is derived from the samples before ``known_before_tick``
(the history before the first simulated start), never from the whole trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from core.models import JobSpec, Market, MarketChoice, Offer
from policies.availability import always_available, availability_stats
from policies.constraints import FilterResult, filter_offers
from policies.views import AvailabilityStats, OfferTable
from policies.zones import zone_correlation
from providers.replay.market import ReplayMarket, ReplayOffer
from providers.replay.timeline import SECONDS_PER_30_DAYS
from scheduler.simulator.speeds import SpeedFn, check, spec_speeds

DEFAULT_TICK_S = 600.0
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class SimulationError(ValueError):
    """The market or the job cannot be simulated; the message says why."""


@dataclass(frozen=True)
class SimMarket:
    """Eligible offers of a market over ``T`` absolute ticks of ``tick_h`` hours.

    - **table**: the eligible offers' :class:`OfferTable` (``m`` rows); **offers** the models.
    - **available**: ``(T, m)`` bool; **price**: ``(T, m)`` USD/hour.
    - **offer_stats**: per-offer :class:`AvailabilityStats`, arrays ``(T, m)``.
    - **pool_stats** ``(T,)``: availability of any eligible spot offer.
    - **zone_available**: ``(z, T)`` bool, some spot offer of that zone available.
    - **filtered**: why offers were left out (for "nothing fits" messages).
    - **known_before_tick**: trace samples before this tick are the history the offer table
      may use (interruption risks); a run must not start earlier (:func:`simulate` checks).
    - **baseline**: when no eligible offer is on-demand, the on-demand offers meeting the
      spec's hardware constraints (whatever its market, regions or prices), to normalise
      costs to; ``None`` otherwise or when there is none (``baseline_note`` says which).
    - **speed**: ``(m,)`` reference-hours of the job's work one market hour on each offer does
      (:mod:`scheduler.simulator.speeds`); ``None``: every offer at 1, as before speeds.
    - **count**: ``(T, m)`` float, instances of each offer available at the tick (the trace's
      count ``k``; ``inf`` for on-demand and spot without a trace), which a gang of ``N``
      nodes needs ``>= N`` of (:meth:`available_for`); ``None``: every count is ``inf`` where
      ``available`` (a market built by hand).
    """

    table: OfferTable
    offers: tuple[Offer, ...]
    tick_h: float
    available: np.ndarray
    price: np.ndarray
    offer_stats: AvailabilityStats
    pool_stats: AvailabilityStats
    zone_available: np.ndarray
    filtered: FilterResult
    known_before_tick: int = 0
    baseline: SimMarket | None = None
    baseline_note: str = ""
    speed: np.ndarray | None = None
    count: np.ndarray | None = None

    def available_for(self, nodes: int, ticks: np.ndarray | slice | int) -> np.ndarray:
        """Availability at ``ticks`` for a job of ``nodes`` instances: ``available`` for one
        node; for a gang, also at least ``nodes`` instances there (the whole gang runs on
        one offer and loses its run when the count drops below ``nodes``)."""
        avail = self.available[ticks]
        if nodes <= 1 or self.count is None:
            return avail
        return avail & (self.count[ticks] >= nodes)

    @property
    def uniform_speed(self) -> bool:
        """Every offer progresses at the same speed (none given, or all equal)."""
        return self.speed is None or bool(np.all(self.speed == self.speed[0]))

    @property
    def ticks(self) -> int:
        return int(self.available.shape[0])

    def correlation_at(self, start_ticks: np.ndarray) -> np.ndarray:
        """``(n, z, z)`` zone correlation from the history before each start tick."""
        out = np.zeros((len(start_ticks), len(self.table.zone_names), len(self.table.zone_names)))
        for s in np.unique(start_ticks):
            corr = zone_correlation(self.zone_available[:, :max(int(s), 1)])
            out[start_ticks == s] = corr
        return out


def _sources(market: ReplayMarket) -> list[tuple[ReplayOffer, Market]]:
    return [(o, mk) for o in market.offers for mk in o.markets()]


def default_tick_s(market: ReplayMarket) -> float:
    """The finest trace gap among the market's spot offers (600 s when none has a trace)."""
    gaps = [o.trace.gap_seconds for o in market.offers if o.trace is not None]
    return min(gaps) if gaps else DEFAULT_TICK_S


def _availability(source: ReplayOffer, market: Market, times_s: np.ndarray) -> np.ndarray:
    if market is Market.ON_DEMAND or source.trace is None:
        return np.ones(len(times_s), bool)
    data = np.asarray(source.trace.data) >= 1
    idx = np.floor(times_s / source.trace.gap_seconds).astype(np.int64) % len(data)
    return data[idx]


def _counts(source: ReplayOffer, market: Market, times_s: np.ndarray) -> np.ndarray:
    """Instances available at each time: the trace's count (the trace loops), ``inf`` for
    on-demand and spot without a trace."""
    if market is Market.ON_DEMAND or source.trace is None:
        return np.full(len(times_s), np.inf)
    data = np.asarray(source.trace.data, dtype=float)
    idx = np.floor(times_s / source.trace.gap_seconds).astype(np.int64) % len(data)
    return data[idx]


def _prices(source: ReplayOffer, market: Market, times_s: np.ndarray) -> np.ndarray:
    if market is Market.ON_DEMAND:
        return np.full(len(times_s), float(source.on_demand_price_usd_per_hour))
    series = source.spot_prices
    assert series is not None
    if not series.points:
        return np.full(len(times_s), float(series.base_price))
    at = np.array([p[0] for p in series.points])
    prices = np.array([series.base_price] + [p[1] for p in series.points])
    return prices[np.searchsorted(at, times_s, side="right")]


def _stats_columns(avail: np.ndarray, is_spot: np.ndarray, tick_h: float) -> AvailabilityStats:
    """Per-offer stats ``(T, m)``: from the samples for spot offers, "always" for on-demand."""
    spot = availability_stats(avail.T, tick_h)
    full = always_available(avail.T.shape)
    pick = {name: np.where(is_spot[:, None], getattr(spot, name), getattr(full, name)).T
            for name in AvailabilityStats.__dataclass_fields__}
    return AvailabilityStats(**pick)


def _past_risk(source: ReplayOffer, market: Market, tick_s: float, before: int) -> float | None:
    """Interruption risk of a spot offer from its trace's samples before tick ``before`` (as
    :meth:`AvailabilityTrace.interruption_risk`: drops per 30 days, capped at 1; 0 with no
    history); ``None`` when the file gives the risk or there is no trace."""
    if market is not Market.SPOT or source.interruption_risk is not None or source.trace is None:
        return None
    if before <= 0:
        return 0.0
    up = _availability(source, market, np.arange(before) * tick_s)
    drops = int(np.count_nonzero(up[:-1] & ~up[1:]))
    return min(1.0, drops * SECONDS_PER_30_DAYS / (before * tick_s))


def _hardware_only(spec: JobSpec) -> JobSpec:
    """``spec`` on-demand, with its hardware constraints only (the normalisation baseline)."""
    fields = JobSpec.model_fields
    return spec.model_copy(update={
        "market": MarketChoice.ON_DEMAND, "max_price_usd_per_hour": None,
        "max_interruption_risk": None,
        **{name: fields[name].default_factory() for name in ("providers", "regions", "zones")}})


def build_sim_market(market: ReplayMarket, spec: JobSpec, ticks: int,
                     tick_s: float | None = None, known_before_tick: int = 0,
                     speed: SpeedFn | None = None) -> SimMarket:
    """Arrays of ``market`` for the offers ``spec`` admits, over absolute ticks ``0..ticks-1``.

    Args:
        market: a loaded replay market (read only).
        spec: the job spec; its constraints choose the offers (judged at market time 0, with
            the interruption risks known then).
        ticks: number of ticks to build (> 0).
        tick_s: tick length in market seconds (default :func:`default_tick_s`).
        known_before_tick: absolute tick of the first simulated start (>= 0): the trace
            before it is the history that derives interruption risks the file does not give.
        speed: the eligible offers' speeds (``offers -> (m,)``, relative to the job's
            reference). Default: the market file's per-offer ``speed`` factors when one is
            not 1 (how fast the replayed world runs jobs there), else
            :func:`~scheduler.simulator.speeds.spec_speeds` (none, all at 1, when the spec
            has neither ``work`` nor ``reference_gpu``).

    Raises:
        SimulationError: ``ticks``/``tick_s`` not positive, ``known_before_tick`` outside
            ``0..ticks-1``, no offer fits the spec (the message says which constraint
            removed how many), or a speed is not finite and positive.
    """
    tick_s = float(tick_s or default_tick_s(market))
    if ticks <= 0 or tick_s <= 0:
        raise SimulationError(f"ticks and tick_s must be > 0, got {ticks} and {tick_s}")
    if not 0 <= known_before_tick < ticks:
        raise SimulationError(f"known_before_tick must be in 0..{ticks - 1}, "
                              f"got {known_before_tick}")
    sources = _sources(market)
    models = []
    for src, mk in sources:
        # capacity varies tick by tick here (``count``), so it does not choose the offers
        model = src.to_offer(mk, 0.0, EPOCH).model_copy(update={"capacity": None})
        risk = _past_risk(src, mk, tick_s, known_before_tick)
        models.append(model if risk is None else model.model_copy(update={"interruption_risk": risk}))
    filtered = filter_offers(spec, models)
    eligible = {id(o) for o in filtered.eligible}
    keep = [i for i, m in enumerate(models) if id(m) in eligible]
    if not keep:
        raise SimulationError("no offer fits the job: " + filtered.explain())
    times = np.arange(ticks) * tick_s
    avail = np.stack([_availability(*sources[i], times) for i in keep], axis=1)
    price = np.stack([_prices(*sources[i], times) for i in keep], axis=1)
    count = np.stack([_counts(*sources[i], times) for i in keep], axis=1)
    table = OfferTable.from_offers([models[i] for i in keep])
    tick_h = tick_s / 3600.0
    spot_avail = avail & table.is_spot[None, :]
    pool = spot_avail.any(axis=1)
    zones = np.stack([spot_avail[:, table.zone == z].any(axis=1)
                      for z in range(len(table.zone_names))])
    pool_stats = availability_stats(pool, tick_h)
    if not table.is_spot.any():
        pool_stats = AvailabilityStats(**{**pool_stats.__dict__, "frac": np.zeros(ticks)})
    if speed is None:
        speed = _file_speeds(market) or spec_speeds(spec)
    speeds = None
    if speed is not None:
        speeds = np.asarray(speed([models[i] for i in keep]), dtype=float)
        try:
            check(speeds, len(keep))
        except ValueError as exc:
            raise SimulationError(str(exc)) from None
    baseline, note = None, ""
    if table.is_spot.all():
        baseline, note = _baseline(market, spec, ticks, tick_s, known_before_tick, speed)
    return SimMarket(
        table=table, offers=tuple(models[i] for i in keep), tick_h=tick_h, available=avail,
        price=price, offer_stats=_stats_columns(avail, table.is_spot, tick_h),
        pool_stats=pool_stats, zone_available=zones, filtered=filtered,
        known_before_tick=known_before_tick, baseline=baseline, baseline_note=note,
        speed=speeds, count=count,
    )


def _file_speeds(market: ReplayMarket) -> SpeedFn | None:
    """The market file's per-offer speed factors, or ``None`` when all are 1."""
    by_key = {o.key(mk): float(getattr(o, "speed", 1.0)) for o, mk in _sources(market)}
    if all(v == 1.0 for v in by_key.values()):
        return None
    return lambda offers: np.array([by_key[o.key] for o in offers])


def _baseline(market: ReplayMarket, spec: JobSpec, ticks: int, tick_s: float,
              known_before_tick: int, speed: SpeedFn | None) -> tuple[SimMarket | None, str]:
    """The on-demand market to normalise a spot-only job's costs to, and a note saying so."""
    try:
        od = build_sim_market(market, _hardware_only(spec), ticks, tick_s, known_before_tick,
                              speed)
    except SimulationError as exc:
        return None, ("no eligible offer is on-demand and no on-demand offer meets the "
                      f"hardware constraints ({exc}): costs are not normalised")
    cheapest = int(np.argmin(od.price[0]))
    return od, ("no eligible offer is on-demand: costs are normalised to the cheapest "
                "on-demand offer meeting the hardware constraints "
                f"({od.table.keys[cheapest]}, ${od.price[0, cheapest]:.3f}/h)")

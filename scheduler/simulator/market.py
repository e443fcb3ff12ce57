"""A replayed market as arrays over simulator ticks: what the policies see at every tick.

Built from a :class:`providers.replay.market.ReplayMarket` (the same market files the replay
provider serves, loaded with :func:`providers.replay.market.load_market`) and a job spec: the
offers the spec admits (:func:`policies.constraints.filter_offers`), then per absolute tick
``k`` (market seconds ``[k·g, (k+1)·g)``) their availability (trace at the tick's start,
**1 = available**), their price (spot price series) and the run statistics of their past
availability (:func:`policies.availability.availability_stats`, samples ``0..k`` only).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from policies.availability import always_available, availability_stats
from policies.constraints import FilterResult, filter_offers
from policies.views import AvailabilityStats, OfferTable
from policies.zones import zone_correlation
from providers.replay.market import ReplayMarket, ReplayOffer
from scheduler.models import JobSpec, Market, Offer

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
    - **pool_available** ``(T,)`` and **pool_stats** ``(T,)``: any eligible spot offer.
    - **zone_available**: ``(z, T)`` bool, some spot offer of that zone available.
    - **filtered**: why offers were left out (for "nothing fits" messages).
    """

    table: OfferTable
    offers: tuple[Offer, ...]
    tick_h: float
    available: np.ndarray
    price: np.ndarray
    offer_stats: AvailabilityStats
    pool_available: np.ndarray
    pool_stats: AvailabilityStats
    zone_available: np.ndarray
    filtered: FilterResult

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


def build_sim_market(market: ReplayMarket, spec: JobSpec, ticks: int,
                     tick_s: float | None = None) -> SimMarket:
    """Arrays of ``market`` for the offers ``spec`` admits, over absolute ticks ``0..ticks-1``.

    Args:
        market: a loaded replay market (read only).
        spec: the job spec; its constraints choose the offers (judged at market time 0).
        ticks: number of ticks to build (> 0).
        tick_s: tick length in market seconds (default :func:`default_tick_s`).

    Raises:
        SimulationError: ``ticks``/``tick_s`` not positive, or no offer fits the spec (the
            message says which constraint removed how many).
    """
    tick_s = float(tick_s or default_tick_s(market))
    if ticks <= 0 or tick_s <= 0:
        raise SimulationError(f"ticks and tick_s must be > 0, got {ticks} and {tick_s}")
    sources = _sources(market)
    models = [src.to_offer(mk, 0.0, EPOCH) for src, mk in sources]
    filtered = filter_offers(spec, models)
    eligible = {id(o) for o in filtered.eligible}
    keep = [i for i, m in enumerate(models) if id(m) in eligible]
    if not keep:
        raise SimulationError("no offer fits the job: " + filtered.explain())
    times = np.arange(ticks) * tick_s
    avail = np.stack([_availability(*sources[i], times) for i in keep], axis=1)
    price = np.stack([_prices(*sources[i], times) for i in keep], axis=1)
    table = OfferTable.from_offers([models[i] for i in keep])
    tick_h = tick_s / 3600.0
    spot_avail = avail & table.is_spot[None, :]
    pool = spot_avail.any(axis=1)
    zones = np.stack([spot_avail[:, table.zone == z].any(axis=1)
                      for z in range(len(table.zone_names))])
    pool_stats = availability_stats(pool, tick_h)
    if not table.is_spot.any():
        pool_stats = AvailabilityStats(**{**pool_stats.__dict__, "frac": np.zeros(ticks)})
    return SimMarket(
        table=table, offers=tuple(models[i] for i in keep), tick_h=tick_h, available=avail,
        price=price, offer_stats=_stats_columns(avail, table.is_spot, tick_h),
        pool_available=pool, pool_stats=pool_stats, zone_available=zones, filtered=filtered,
    )

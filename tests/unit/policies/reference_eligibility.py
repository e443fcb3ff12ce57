"""The placement path as it was before the batched one (eligibility one spec at a time), kept
verbatim as the reference the equivalence tests and the speed benchmark compare with."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.models import AllowDeny, JobSpec, MarketChoice
from policies.views import OfferTable


def _isin(codes: np.ndarray, vocab: tuple[str, ...], names: Sequence[str]) -> np.ndarray:
    wanted = [i for i, v in enumerate(vocab) if v in set(names)]
    return np.isin(codes, wanted)


def _permits(rule: AllowDeny, codes: np.ndarray, vocab: tuple[str, ...]) -> np.ndarray:
    ok = np.ones(len(codes), bool)
    if rule.allow:
        ok &= _isin(codes, vocab, rule.allow)
    if rule.deny:
        ok &= ~_isin(codes, vocab, rule.deny)
    return ok


def _hardware(spec: JobSpec, table: OfferTable) -> np.ndarray:
    res = spec.resources
    ok = (table.gpu_count >= res.gpu_count) & (table.vram_gib >= res.min_vram_gib) & \
        (table.vcpus >= res.min_vcpus) & (table.memory_gib >= res.min_memory_gib)
    if res.gpu_models:
        ok &= _isin(table.labels["gpu_model"], table.vocab["gpu_model"],
                    [g.lower() for g in res.gpu_models])
    if res.nodes > 1 and table.capacity.size:
        # unknown capacity (nan) is left to the launch, as for one instance
        ok &= np.isnan(table.capacity) | (table.capacity >= res.nodes)
    return ok


def _location(spec: JobSpec, table: OfferTable) -> np.ndarray:
    ok = _permits(spec.providers, table.labels["provider"], table.vocab["provider"])
    ok &= _permits(spec.regions, table.labels["region_label"], table.vocab["region_label"])
    ok &= _permits(spec.zones, table.labels["zone_label"], table.vocab["zone_label"])
    return ok


def _market(spec: JobSpec, table: OfferTable, price: np.ndarray) -> np.ndarray:
    ok = np.ones(len(table), bool)
    if spec.market is MarketChoice.SPOT:
        ok &= table.is_spot
    elif spec.market is MarketChoice.ON_DEMAND:
        ok &= ~table.is_spot
    if spec.max_price_usd_per_hour is not None:
        ok &= price <= spec.max_price_usd_per_hour
    if spec.max_interruption_risk is not None:
        ok &= table.interruption_risk <= spec.max_interruption_risk
    return ok


_PARTS = (
    ("hardware", _hardware, lambda s: s.resources.model_dump_json()),
    ("location", _location, lambda s: f"{s.providers.model_dump_json()}{s.regions.model_dump_json()}"
                                      f"{s.zones.model_dump_json()}"),
    ("market", None, lambda s: f"{s.market.value}|{s.max_price_usd_per_hour}|"
                               f"{s.max_interruption_risk}"),
)


def spec_mask(spec: JobSpec, table: OfferTable, price_usd_per_hour: np.ndarray) -> np.ndarray:
    """``(m,)`` bool: the offers ``spec`` admits (every constraint of
    :data:`policies.constraints.CONSTRAINTS`), at the given prices (USD/hour, ``(m,)``)."""
    return _hardware(spec, table) & _location(spec, table) & \
        _market(spec, table, price_usd_per_hour)


def eligible_matrix(specs: Sequence[JobSpec], table: OfferTable, price_usd_per_hour: np.ndarray,
                    unavailable: np.ndarray | None = None) -> np.ndarray:
    """``(n, m)`` bool: offer ``j`` is admitted by spec ``i`` and not marked unavailable.

    Args:
        specs: ``n`` job specs. The hardware, location and market parts of the constraints are
            each evaluated once per distinct value among the specs, then combined.
        table: the offers' columns (:meth:`OfferTable.from_offers`).
        price_usd_per_hour: ``(m,)`` current prices.
        unavailable: ``(m,)`` bool, offers that must not be used now (capacity errors, a zone
            just reclaimed), or ``None``.
    """
    cache: dict[tuple[str, str], np.ndarray] = {}
    out = np.empty((len(specs), len(table)), bool)
    for i, spec in enumerate(specs):
        row = None
        for name, fn, key in _PARTS:
            k = (name, key(spec))
            if k not in cache:
                cache[k] = fn(spec, table) if fn else _market(spec, table, price_usd_per_hour)
            row = cache[k] if row is None else row & cache[k]
        out[i] = row
    if unavailable is not None:
        out &= ~unavailable[None, :]
    return out

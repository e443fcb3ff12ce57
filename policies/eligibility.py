"""Vectorised job constraints: which of ``m`` offers each of ``n`` job specs admits.

The same constraints as :mod:`policies.constraints` (hardware and a gang's room for its nodes,
location, market, price, risk),
evaluated with numpy over the columns of an :class:`~policies.views.OfferTable` so that placing
many jobs against many offers stays fast. :func:`policies.constraints.filter_offers` remains the
reference (and the one that explains refusals); the unit tests check the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.models import AllowDeny, JobSpec, MarketChoice
from policies.views import OfferTable


def _isin(codes: np.ndarray, vocab: tuple[str, ...], names: Sequence[str]) -> np.ndarray:
    names = set(names)
    table = np.array([v in names for v in vocab] + [False], bool)
    return table[codes]


def _permits(rule: AllowDeny, codes: np.ndarray, vocab: tuple[str, ...]) -> np.ndarray:
    ok = np.ones(len(codes), bool)
    if rule.allow:
        ok &= _isin(codes, vocab, rule.allow)
    if rule.deny:
        ok &= ~_isin(codes, vocab, rule.deny)
    return ok


def _size(spec: JobSpec, table: OfferTable) -> np.ndarray:
    """GPUs, memory, vCPUs, and a gang's room for its nodes."""
    res = spec.resources
    ok = (table.gpu_count >= res.gpu_count) & (table.vram_gib >= res.min_vram_gib) & \
        (table.vcpus >= res.min_vcpus) & (table.memory_gib >= res.min_memory_gib)
    if res.nodes > 1 and table.capacity.size:
        # unknown capacity (nan) is left to the launch, as for one instance
        ok &= np.isnan(table.capacity) | (table.capacity >= res.nodes)
    return ok


def _models(spec: JobSpec, table: OfferTable) -> np.ndarray:
    """The GPU models the spec allows (any without a list)."""
    models = spec.resources.gpu_models
    if not models:
        return np.ones(len(table), bool)
    return _isin(table.labels["gpu_model"], table.vocab["gpu_model"], [g.lower() for g in models])


def _hardware(spec: JobSpec, table: OfferTable) -> np.ndarray:
    return _size(spec, table) & _models(spec, table)


def _location(spec: JobSpec, table: OfferTable) -> np.ndarray:
    ok = _permits(spec.providers, table.labels["provider"], table.vocab["provider"])
    ok &= _permits(spec.regions, table.labels["region_label"], table.vocab["region_label"])
    ok &= _permits(spec.zones, table.labels["zone_label"], table.vocab["zone_label"])
    return ok


def _market(spec: JobSpec, table: OfferTable, price: np.ndarray) -> np.ndarray:
    ok = _kind(spec, table)
    if spec.max_price_usd_per_hour is not None:
        ok &= price <= spec.max_price_usd_per_hour
    return ok


def _kind(spec: JobSpec, table: OfferTable) -> np.ndarray:
    """The market part without the price limit (spot / on-demand, interruption risk)."""
    ok = np.ones(len(table), bool)
    if spec.market is MarketChoice.SPOT:
        ok &= table.is_spot
    elif spec.market is MarketChoice.ON_DEMAND:
        ok &= ~table.is_spot
    if spec.max_interruption_risk is not None:
        ok &= table.interruption_risk <= spec.max_interruption_risk
    return ok


def _part_keys(spec: JobSpec) -> tuple[tuple, tuple | None, tuple, tuple]:
    """Keys of the size, GPU model, location and market parts: every field each reads, except
    the price limit (checked per job)."""
    res, providers, regions, zones = spec.resources, spec.providers, spec.regions, spec.zones
    return ((res.gpu_count, res.min_vram_gib, res.min_vcpus, res.min_memory_gib, res.nodes),
            tuple(res.gpu_models) if res.gpu_models else None,
            (tuple(providers.allow), tuple(providers.deny), tuple(regions.allow),
             tuple(regions.deny), tuple(zones.allow), tuple(zones.deny)),
            (spec.market, spec.max_interruption_risk))


_PART_FNS = (_size, _models, _location, _kind)


def spec_mask(spec: JobSpec, table: OfferTable, price_usd_per_hour: np.ndarray) -> np.ndarray:
    """``(m,)`` bool: the offers ``spec`` admits (every constraint of
    :data:`policies.constraints.CONSTRAINTS`), at the given prices (USD/hour, ``(m,)``)."""
    return _hardware(spec, table) & _location(spec, table) & \
        _market(spec, table, price_usd_per_hour)


# Rows of a block: the temporaries of a block stay in the core's cache and are reused, so the
# only large allocations are the result and the combinations' rows.
_BLOCK_CELLS = 1 << 19


def _step(m: int) -> int:
    return max(1, _BLOCK_CELLS // max(m, 1))


def _combine(parts: list[tuple[np.ndarray, np.ndarray]], a: int, b: int, out: np.ndarray,
             tmp: np.ndarray) -> None:
    """In place, ``out`` ``(b - a, m)``: the AND of each part's row for combinations ``a:b``
    (``parts``: per part its ``(kinds, m)`` rows and each combination's kind)."""
    for part, (rows, index) in enumerate(parts):
        if len(rows) == 1:      # one kind (common): a broadcast row, no gather
            if part == 0:
                out[...] = rows[0]
            else:
                out &= rows[0]
        elif part == 0:
            np.take(rows, index[a:b], axis=0, out=out, mode="clip")
        else:
            t = tmp[:b - a]
            np.take(rows, index[a:b], axis=0, out=t, mode="clip")
            out &= t


def eligible_matrix(specs: Sequence[JobSpec], table: OfferTable, price_usd_per_hour: np.ndarray,
                    unavailable: np.ndarray | None = None) -> np.ndarray:
    """``(n, m)`` bool: offer ``j`` is admitted by spec ``i`` and not marked unavailable.

    Args:
        specs: ``n`` job specs. The size, GPU model, location and market parts (the latter
            without the price limit) are each evaluated once per distinct value among the
            specs and combined once per distinct combination of the four; a job's row is its
            combination's with its price limit applied.
        table: the offers' columns (:meth:`OfferTable.from_offers`).
        price_usd_per_hour: ``(m,)`` current prices.
        unavailable: ``(m,)`` bool, offers that must not be used now (capacity errors, a zone
            just reclaimed), or ``None``.
    """
    n, m = len(specs), len(table)
    combos: dict[tuple, int] = {}
    combo_of = np.array([combos.setdefault(_part_keys(spec), len(combos)) for spec in specs],
                        dtype=np.intp)
    # the first job of each combination (numbered in order of first appearance)
    first = np.unique(combo_of, return_index=True)[1]
    parts = []
    for part, fn in enumerate(_PART_FNS):
        kinds: dict[tuple, int] = {}
        index = np.array([kinds.setdefault(key[part], len(kinds)) for key in combos],
                         dtype=np.intp)
        lead = {k: i for i, k in reversed(list(enumerate(index.tolist())))}
        rows = np.array([fn(specs[first[lead[k]]], table) for k in range(len(kinds))],
                        bool).reshape(len(kinds), m)
        if part == 0 and unavailable is not None:
            rows &= ~unavailable[None, :]
        parts.append((rows, index))
    step = _step(m)
    tmp = np.empty((min(n, step), m), bool)
    # Every job its own combination (numbered in job order): its row is combined in place.
    direct = len(combos) == n
    masks = None
    if not direct:
        masks = np.empty((len(combos), m), bool)
        for a in range(0, len(combos), step):
            b = min(a + step, len(combos))
            _combine(parts, a, b, masks[a:b], tmp)
    limits = [spec.max_price_usd_per_hour for spec in specs]
    limited = any(limit is not None for limit in limits)
    if limited:
        price = np.asarray(price_usd_per_hour, dtype=float)
        cap = np.array([np.inf if limit is None else limit for limit in limits], dtype=float)
        # no limit admits any price, even an unknown one
        free = np.array([limit is None for limit in limits])[:, None] \
            if np.isnan(price).any() else None
    out = np.empty((n, m), bool)
    for a in range(0, n, step):
        b = min(a + step, n)
        blk = out[a:b]
        if direct:
            _combine(parts, a, b, blk, tmp)
        else:
            np.take(masks, combo_of[a:b], axis=0, out=blk, mode="clip")
        if limited:
            within = np.less_equal(price[None, :], cap[a:b, None], out=tmp[:b - a])
            if free is not None:
                within |= free[a:b]
            blk &= within
    return out

"""The omniscient optimum: the cheapest schedule knowing the whole future of the market.

An exact dynamic program over the simulator's own model (:mod:`scheduler.simulator.engine`):
at each tick a job runs one offer or nothing; a new instance owes the restart overhead before
it progresses; a spot instance exists only while its offer is available; billing is per tick
(the part used on the last). It is the lower bound of every policy's cost on the same run.

State after each tick: (offer, overhead still owed) or idle, and the progress made, counted in
units ``u`` (the gcd of the per-tick progress amounts in whole seconds). The value is the least
cost to reach that state; the DP sweeps ticks with numpy over (runs × progress levels).
Continuous checkpoints only (nothing lost at a reclaim beyond the overhead).
"""

from __future__ import annotations

import math

import numpy as np

from scheduler.simulator.market import SimMarket, SimulationError

MAX_CELLS = 5e10
"""Refuse DPs larger than this many (tick × run × state × progress) cell updates (~100 s)."""
CHUNK_RUNS = 64


def _phases(gs: int, ds: int) -> tuple[list[int], list[int], list[int]]:
    """Owed overhead per phase, progress per tick in that phase, and the next phase."""
    owed = [ds] if ds > 0 else [0]
    while owed[-1] > 0:
        owed.append(max(0, owed[-1] - gs))
    inc = [gs - min(gs, o) for o in owed]
    nxt = [owed.index(max(0, o - gs)) for o in owed]
    return owed, inc, nxt


def _distinct_offers(market: SimMarket, ticks: np.ndarray) -> list[int]:
    """Offer columns with distinct (availability, price) over the ticks used: two identical
    offers (say on-demand in two zones at one price) are one choice for the optimum."""
    seen, keep = set(), []
    for j in range(market.available.shape[1]):
        sig = (market.available[ticks, j].tobytes(), market.price[ticks, j].tobytes())
        if sig not in seen:
            seen.add(sig)
            keep.append(j)
    return keep


def _shift(values: np.ndarray, by: int) -> np.ndarray:
    if by == 0:
        return values
    out = np.full_like(values, np.inf)
    out[:, by:] = values[:, :-by]
    return out


def optimal_cost(market: SimMarket, compute_h: float, restart_overhead_h: float,
                 start_ticks: np.ndarray, deadlines_h: list[float]) -> np.ndarray:
    """Least cost (USD) to finish ``compute_h`` by each deadline, per start.

    Args:
        market: the simulated market (availability and prices per tick).
        compute_h, restart_overhead_h: the job (hours; rounded to whole seconds).
        start_ticks: ``(R,)`` absolute start ticks.
        deadlines_h: hours after the start, each a whole number of ticks.

    Returns:
        ``(R, len(deadlines_h))`` USD, ``inf`` where no schedule finishes in time.

    Raises:
        SimulationError: a deadline is not a whole number of ticks, the market is too short,
            or the DP would be too large (tiny progress unit).
    """
    gs, ds = round(market.tick_h * 3600), round(restart_overhead_h * 3600)
    cs = round(compute_h * 3600)
    dl_ticks = [round(d * 3600 / gs) for d in deadlines_h]
    if any(abs(t * gs - d * 3600) > 1e-6 for t, d in zip(dl_ticks, deadlines_h)):
        raise SimulationError("deadlines must be whole numbers of ticks for the optimum")
    starts = np.asarray(start_ticks, dtype=np.int64)
    horizon = max(dl_ticks)
    if starts.max(initial=0) + horizon > market.ticks:
        raise SimulationError("the market is too short for these starts and deadlines")
    owed, inc, nxt = _phases(gs, ds)
    unit = math.gcd(gs, *[i for i in inc if i > 0])
    levels = -(-cs // unit)
    used = (starts[:, None] + np.arange(horizon)[None, :]).ravel()
    offers = _distinct_offers(market, used)
    cells = horizon * len(starts) * (1 + len(offers) * len(owed)) * levels * 3
    if cells > MAX_CELLS:
        raise SimulationError(f"the optimum DP is too large ({cells:.2g} cell updates)")
    model = (owed, inc, nxt, unit, levels, cs, gs)
    parts = [_sweep(market, starts[i:i + CHUNK_RUNS], offers, model, dl_ticks)
             for i in range(0, len(starts), CHUNK_RUNS)]
    return np.concatenate(parts) if parts else np.zeros((0, len(dl_ticks)))


def _sweep(market: SimMarket, starts: np.ndarray, offers: list[int], model: tuple,
           dl_ticks: list[int]) -> np.ndarray:
    owed, inc, nxt, unit, levels, cs, gs = model
    r = len(starts)
    inf = np.float64(np.inf)
    idle = np.full((r, levels), inf)
    idle[:, 0] = 0.0
    state = {x: [np.full((r, levels), inf) for _ in owed] for x in offers}
    done = np.full(r, inf)
    out = np.full((r, len(dl_ticks)), inf)
    for t in range(max(dl_ticks)):
        k = starts + t
        best = idle.copy()
        for x in offers:
            for v in state[x]:
                np.minimum(best, v, out=best)
        new_state = {}
        for x in offers:
            ok = market.available[k, x][:, None]
            tick_cost = market.price[k, x] * (gs / 3600.0)
            fresh = [np.full((r, levels), inf) for _ in owed]
            sources = [(best, 0)] + [(state[x][j], j) for j in range(len(owed))]
            for src, j in sources:
                step = inc[j] // unit
                moved = _shift(src, step) + tick_cost[:, None]
                np.minimum(fresh[nxt[j]], np.where(ok, moved, inf), out=fresh[nxt[j]])
                done = np.minimum(done, _finish(src, j, model, market.price[k, x], ok[:, 0]))
            new_state[x] = fresh
        state, idle = new_state, best
        for i, dt in enumerate(dl_ticks):
            if dt == t + 1:
                out[:, i] = done
    return out


def _finish(src: np.ndarray, j: int, model: tuple, price: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Least cost of finishing within this tick from ``src`` in phase ``j``, ``(R,)``."""
    owed, inc, _, unit, levels, cs, gs = model
    if inc[j] == 0:
        return np.full(src.shape[0], np.inf)
    first = max(0, -(-(cs - inc[j]) // unit))
    if first >= levels:
        return np.full(src.shape[0], np.inf)
    p = np.arange(first, levels)
    seconds = min(gs, owed[j]) + (cs - p * unit)
    cost = src[:, first:] + price[:, None] * (seconds[None, :] / 3600.0)
    return np.where(ok, cost.min(axis=1), np.inf)

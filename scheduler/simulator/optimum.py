"""The omniscient optimum: the cheapest schedule knowing the whole future of the market.

An exact dynamic program over the simulator's own model (:mod:`scheduler.simulator.simulate`):
at each tick a job runs one offer or nothing; a new instance owes the restart overhead before
it progresses; a spot instance exists only while its offer is available; billing is per tick
(the part used on the last). It is the lower bound of every policy's cost on the same run.
Continuous checkpoints and no extra time for a voluntary move: with checkpoint intervals or
``move_extra_h`` the policies pay more, so it stays a lower bound.

Progress is counted in units ``u`` (the gcd, in whole seconds, of a tick and of the progress
a new instance makes on its first productive tick). Two facts make it small and fast:

- Only two kinds of state matter at the end of a tick: *best* (the least cost of having made
  ``p`` units, whatever runs now; idling keeps it) and *warm on offer x* (an instance of ``x``
  that has paid its overhead). An instance still paying its overhead never beats the idle job
  it came from (same progress, more cost), so a start is one jump over its ``w`` overhead
  ticks: from *best* ``w + 1`` ticks ago to *warm* now, if ``x`` stayed available throughout.
- Progress at the end of tick ``t`` is at most what one instance could have done since the
  start, and at least what still lets a warm instance finish by the deadline: the DP sweeps
  that band only (its area is about ``levels × slack ticks`` per run, not
  ``levels × deadline ticks``), with numpy over (runs × band).
"""

from __future__ import annotations

import math

import numpy as np

from scheduler.simulator.market import SimMarket, SimulationError

MAX_CELLS = 1e11
"""Refuse DPs with more (run × offer × band cell) updates than this: 0.8-2e8 are made per
second on one shared core (``benchmarks/policies/RESULTS-optimum.md``), so 8-20 minutes."""
CELLS_PER_S = 1e8
CHUNK_RUNS = 32


def deadline_ticks(deadline_h: float, tick_h: float) -> int:
    """Whole ticks of a deadline, rounded down to the tick grid (a finish after the last
    whole tick is not counted): ``floor(deadline_h / tick_h)``, with a 1e-9 tolerance."""
    return int(math.floor(deadline_h / tick_h + 1e-9))


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


class _Model:
    """The job on the tick grid, in whole seconds and progress units."""

    def __init__(self, tick_h: float, compute_h: float, restart_overhead_h: float, dl: int):
        self.gs = round(tick_h * 3600)
        self.ds = round(restart_overhead_h * 3600)
        self.cs = round(compute_h * 3600)
        if self.gs <= 0 or self.cs <= 0 or self.ds < 0:
            raise SimulationError("tick, compute and overhead must be positive (whole seconds)")
        self.w, self.rem = divmod(self.ds, self.gs)   # overhead ticks without progress, rest
        self.first = self.gs - self.rem                # progress of a new instance's tick w
        self.unit = math.gcd(self.gs, self.first)
        self.levels = -(-self.cs // self.unit)
        self.step, self.first_step = self.gs // self.unit, self.first // self.unit
        self.dl = dl

    def band(self, t: int) -> tuple[int, int]:
        """Levels ``[lo, hi)`` that can matter at the end of tick ``t`` (0-based)."""
        u = self.unit
        lo = max(0, -(-(self.cs - (self.dl - 1 - t) * self.gs) // u))
        hi = min(self.levels, max(0, ((t + 1) * self.gs - self.ds) // u) + 1)
        return lo, max(lo, hi)

    def cells(self, runs: int, offers: int) -> float:
        return float(runs * offers * sum(hi - lo for lo, hi in map(self.band, range(self.dl))))


def optimal_cost(market: SimMarket, compute_h: float, restart_overhead_h: float,
                 start_ticks: np.ndarray, deadlines_h: list[float]) -> np.ndarray:
    """Least cost (USD) to finish ``compute_h`` by each deadline, per start.

    Args:
        market: the simulated market (availability and prices per tick).
        compute_h, restart_overhead_h: the job (hours; rounded to whole seconds).
        start_ticks: ``(R,)`` absolute start ticks.
        deadlines_h: hours after the start (> 0), each rounded down to the tick grid
            (:func:`deadline_ticks`): the optimum finishes by the last whole tick before it.

    Returns:
        ``(R, len(deadlines_h))`` USD, ``inf`` where no schedule finishes in time.

    Raises:
        SimulationError: a deadline shorter than one tick, the market too short for the
            starts and deadlines, or a DP above :data:`MAX_CELLS` cell updates (the message
            gives its size).
    """
    dl_ticks = [deadline_ticks(d, market.tick_h) for d in deadlines_h]
    if not dl_ticks:
        return np.zeros((len(start_ticks), 0))
    if min(dl_ticks) < 1:
        raise SimulationError(f"a deadline of {min(deadlines_h)!r} h is shorter than one tick "
                              f"({market.tick_h * 3600:g} s)")
    starts = np.asarray(start_ticks, dtype=np.int64)
    horizon = max(dl_ticks)
    if starts.max(initial=0) + horizon > market.ticks:
        raise SimulationError(f"the market ({market.ticks} ticks) is too short for starts up to "
                              f"tick {starts.max(initial=0)} and a {horizon}-tick deadline")
    model = _Model(market.tick_h, compute_h, restart_overhead_h, horizon)
    used = (starts[:, None] + np.arange(horizon)[None, :]).ravel()
    offers = _distinct_offers(market, used) if len(starts) else []
    cells = model.cells(len(starts), len(offers))
    if cells > MAX_CELLS:
        raise SimulationError(f"the optimum DP is too large ({cells:.2g} cell updates, about "
                              f"{cells / CELLS_PER_S / 60:.0f} min; limit {MAX_CELLS:.0g}): fewer runs, "
                              "a shorter deadline or no optimum (--no-optimum)")
    parts = [_sweep(market, starts[i:i + CHUNK_RUNS], offers, model, dl_ticks)
             for i in range(0, len(starts), CHUNK_RUNS)]
    return np.concatenate(parts) if parts else np.zeros((0, len(dl_ticks)))


def _tick_costs(market: SimMarket, starts: np.ndarray, x: int, model: _Model):
    """Per run and tick ``(r, dl)``: USD of a full tick on ``x`` (``inf`` when unavailable),
    of the ``w`` overhead-only ticks before it (``inf`` if ``x`` was unavailable in one, or
    they fall before the run's start), and the price."""
    k = starts[:, None] + np.arange(model.dl)[None, :]
    price = market.price[k, x]
    full = np.where(market.available[k, x], price * (model.gs / 3600.0), np.inf)
    if model.w == 0:
        return full, np.zeros_like(full), price
    pad = np.concatenate([np.full((len(starts), model.w), np.inf), full[:, :-1]], axis=1)
    window = np.lib.stride_tricks.sliding_window_view(pad, model.w, axis=1)
    return full, window.sum(axis=2), price


def _sweep(market: SimMarket, starts: np.ndarray, offers: list[int], model: _Model,
           dl_ticks: list[int]) -> np.ndarray:
    r, levels, w = len(starts), model.levels, model.w
    s, f = model.step, model.first_step
    inf = np.inf
    # ring[tau % (w + 1)] holds "best" at the end of tick tau for the last w + 1 ticks
    # (tick -1: nothing done yet, at no cost; earlier ticks: inf, no start before the run's)
    ring = [np.full((r, levels), inf) for _ in range(w + 1)]
    ring[w][:, 0] = 0.0
    warm = {x: [np.full((r, levels), inf), np.full((r, levels), inf)] for x in offers}
    costs = {x: _tick_costs(market, starts, x, model) for x in offers}
    done = np.full(r, inf)
    out = np.full((r, len(dl_ticks)), inf)
    left_h = (model.cs - np.arange(levels) * model.unit) / 3600.0   # compute left per level
    warm_from = max(0, -(-(model.cs - model.gs) // model.unit))     # a warm tick finishes
    start_from = max(0, -(-(model.cs - model.first) // model.unit))  # a start's tick finishes
    rem_h = model.rem / 3600.0
    for t in range(model.dl):
        lo, hi = model.band(t)
        old = ring[t % (w + 1)]               # best at the end of tick t - w - 1
        bands = []
        for x in offers:
            full, pre, price = costs[x]
            c_full, c_pre, p_now = full[:, t:t + 1], pre[:, t:t + 1], price[:, t:t + 1]
            before, cur = warm[x][t % 2], warm[x][(t + 1) % 2]
            ok = np.isfinite(c_full[:, 0])
            if not ok.any():
                cur[:, lo:hi] = inf
                continue
            # finishing within this tick: on a warm instance, or on one started w ticks ago
            fin = (before[:, warm_from:] + p_now * left_h[warm_from:]).min(axis=1)
            from_start = (old[:, start_from:] + p_now * (rem_h + left_h[start_from:])).min(axis=1)
            fin = np.minimum(fin, from_start + c_pre[:, 0])
            np.minimum(done, np.where(ok, fin, inf), out=done)
            # warm at the end of this tick: kept one more tick, or started w ticks ago
            band = cur[:, lo:hi]
            a, b = max(lo, s), max(lo, f)
            band[:, :a - lo] = inf
            if a < hi:
                np.add(before[:, a - s:hi - s], c_full, out=band[:, a - lo:])
            if b < hi:
                np.minimum(band[:, b - lo:], old[:, b - f:hi - f] + (c_pre + c_full),
                           out=band[:, b - lo:])
            bands.append(band)
        # best at the end of this tick: idle (best before) or warm on some offer
        best = ring[t % (w + 1)]
        if w > 0:
            best[:, lo:hi] = ring[(t - 1) % (w + 1)][:, lo:hi]
        for band in bands:
            np.minimum(best[:, lo:hi], band, out=best[:, lo:hi])
        for i, dt in enumerate(dl_ticks):
            if dt == t + 1:
                out[:, i] = done
    return out

"""Spot, on-demand or wait: the cost-optimal choice under a model of spot availability.

The deadline rules of :mod:`policies.deadline` keep every job safe; within what is safe, this
module says which of the three a deadline job should do now, by dynamic programming over

- the job: time to the deadline ``r`` and work left ``c`` (hours of the on-demand fallback,
  plus the overhead its instance still owes), and what it runs (nothing, spot, on-demand);
- spot capacity of the job's pool (any of its spot offers): available or not, and for how long
  it has been so. Run lengths (available and unavailable alike) are Lomax (Pareto II) with
  shape 2 and the pool's observed mean (:attr:`policies.views.AvailabilityStats.mean_up_h`,
  ``mean_down_h``; a gang's available runs ÷ its nodes), the heavy tail whose expected
  remaining length grows with age (:mod:`policies.availability`); each run is independent of
  the others (an alternating renewal process).

The cost is USD in on-demand hours: an hour of spot costs ``ρ`` (the pool's spot price per
hour of work ÷ the fallback's), an hour of on-demand 1, waiting 0; a new instance owes the
restart overhead ``d`` before it makes progress (billed); a reclaim stops the spot instance
(progress is kept: checkpoints at the notice, the simulator's model); missing the deadline is
forbidden. The table minimises the expected cost to finish. The job's own rules still apply
on top (the safety net overrides the table whenever a choice would not be safe).

Time is discretised in steps of ``h`` hours, the smallest ``max(10 min, the job's decision
interval) × 2^k`` with the deadline within :data:`STEPS_R` steps; slack (time to the deadline
less the work left) in whole steps up to :data:`STEPS_SLACK` (more is decided as that much).
A table is solved once per rounded model (step, mean run lengths, price ratio, overhead,
speed; about 0.15 s) and cached (:data:`CACHE_TABLES` tables of about 1.1 MB): a decision is
then a lookup. Jobs it does not cover (no deadline, no on-demand fallback or no spot offer,
a deadline past 480 steps of 10 min × 2^8, less time than on-demand needs) get
:data:`NO_ADVICE` and follow the rules of :mod:`policies.deadline` alone: an end-game slack
reserve (:func:`~policies.deadline.on_demand_needed`) and a minimum run age for leaving
on-demand (:func:`~policies.deadline.flip_age_h`).

The model runs spot at the fallback's speed × ``spot_speed`` and takes the job's checkpoints
as continuous; periodic checkpoints' rework at a reclaim is the safety net's to cover.
Measurements: ``benchmarks/policies/RESULTS.md``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

WAIT, SPOT, ON_DEMAND = 0, 1, 2
"""Advice codes; :data:`NO_ADVICE` (-1) where the table does not apply."""
NO_ADVICE = -1

STEPS_R = 480
"""Time steps to the deadline a table covers."""
STEPS_SLACK = 144
"""Slack steps a table tells apart; more slack is decided as this much (24 h at 10 min)."""
AGES = 16
"""Ages (steps) told apart; older runs share the hazard of age ``AGES - 1``."""
BASE_STEP_H = 1.0 / 6.0
MAX_DOUBLINGS = 8
CACHE_TABLES = 64
LOMAX_SHAPE = 2.0
# Keys are rounded so that nearby models share a table (a 22 % step in the mean lengths).
MEAN_STEP_LOG = 0.2
MISS = 1e9
WAIT_COST = 0.05
"""Cost of a step spent waiting, in on-demand steps: among choices of (nearly) equal expected
cost, the one that makes progress (a finished job is worth something to everyone)."""

_UP_MODES = (WAIT, SPOT, ON_DEMAND)     # what the job ran in the last step, spot available
_DOWN_MODES = (WAIT, ON_DEMAND)         # the same, spot unavailable (a spot job was reclaimed)
_DOWN_INDEX = {WAIT: 0, SPOT: 0, ON_DEMAND: 1}   # a spot job whose capacity goes runs nothing


@dataclass(frozen=True)
class Model:
    """One table's inputs. ``step_h`` hours per step; ``mean_up_steps`` / ``mean_down_steps``
    mean run lengths in steps (> 0); ``spot_ratio`` spot cost ÷ on-demand cost per hour of
    work (> 0); ``overhead_steps`` the restart overhead in steps (>= 0); ``spot_speed`` hours
    of the fallback's work an hour of spot does (> 0); ``wait_cost`` what a step spent
    waiting costs, in on-demand steps (>= 0)."""

    step_h: float
    mean_up_steps: float
    mean_down_steps: float
    spot_ratio: float
    overhead_steps: float
    spot_speed: float = 1.0
    wait_cost: float = WAIT_COST


def stay_probabilities(mean_steps: float, shape: float = LOMAX_SHAPE) -> np.ndarray:
    """``(AGES,)`` probability that a run of age ``k`` steps lasts one more step, for Lomax run
    lengths of the given mean (steps) and shape: ``((λ + k) / (λ + k + 1))^shape`` with
    ``λ = mean·(shape − 1)``."""
    lam = max(mean_steps * (shape - 1.0), 1e-3)
    k = np.arange(AGES, dtype=float)
    return ((lam + k) / (lam + k + 1.0)) ** shape


class _Shift:
    """``values[j + delta]`` along axis 0 (slack steps), linear between grid points; below 0
    (the deadline missed) :data:`MISS`, above the last index the last value (more slack is
    decided as the most the table tells apart)."""

    def __init__(self, n: int, delta: float) -> None:
        lo = math.floor(delta)
        self.w = np.float32(delta - lo)
        idx = np.arange(n) + lo
        # index 0 of the padded values is the MISS row
        self.i0 = np.clip(idx, -1, n - 1) + 1
        self.i1 = np.clip(idx + 1, -1, n - 1) + 1

    def __call__(self, padded: np.ndarray) -> np.ndarray:
        lo = padded[self.i0]
        if self.w < 1e-7:
            return lo
        return lo + self.w * (padded[self.i1] - lo)


@functools.lru_cache(maxsize=CACHE_TABLES)
def table(model: Model) -> tuple[np.ndarray, np.ndarray]:
    """The optimal choice in every state, solved backwards from the deadline.

    States are ``(r, j, k)``: ``r`` steps to the deadline (``0..STEPS_R``), ``j`` steps of
    slack (``r`` less the steps of work left, ``0..STEPS_SLACK``) and the age ``k`` of the
    pool's current state. A step waiting costs one step of slack, a step running none (a new
    instance: its overhead), so slack never grows and the table needs no more of it than it
    tells apart.

    Returns:
        ``(up, down)``: ``up[r, j, k]`` packs three 2-bit choices (:data:`WAIT`,
        :data:`SPOT`, :data:`ON_DEMAND`) for a job that ran nothing (bits 0-1), spot (2-3)
        or on-demand (4-5) in the last step, spot available for ``k`` steps; ``down[r, j, k]``
        packs two 1-bit choices (1: on-demand) for a job that ran nothing (bit 0) or
        on-demand (bit 1), spot unavailable for ``k`` steps.
    """
    # float32: values are only compared, and 7 digits tell every choice apart
    q = stay_probabilities(model.mean_up_steps).astype(np.float32)[None, :, None]
    p = stay_probabilities(model.mean_down_steps).astype(np.float32)[None, :, None]
    n_j = STEPS_SLACK + 1
    slack = np.arange(n_j)
    d, sigma = model.overhead_steps, model.spot_speed
    # each way to spend a step: (cost, useful part of the step, speed of its progress)
    ways = {"wait": (model.wait_cost, 0.0, 1.0), "spot_new": (model.spot_ratio * sigma, 1.0 - d, sigma),
            "spot_cont": (model.spot_ratio * sigma, 1.0, sigma),
            "od_new": (1.0, 1.0 - d, 1.0), "od_cont": (1.0, 1.0, 1.0)}
    shifts = {name: _Shift(n_j, useful * speed - 1.0) for name, (_, useful, speed) in ways.items()}

    up = np.zeros((n_j, AGES, 3), np.float32)       # values at r = 0: every j >= 0 is done
    down = np.zeros((n_j, AGES, 2), np.float32)
    miss_up = np.full((1, AGES, 3), MISS, np.float32)
    miss_down = np.full((1, AGES, 2), MISS, np.float32)
    down_of_up = [_DOWN_INDEX[m] for m in _UP_MODES]
    up_of_down = list(_DOWN_MODES)
    up_t = np.zeros((STEPS_R + 1, n_j, AGES), np.uint8)
    down_t = np.zeros((STEPS_R + 1, n_j, AGES), np.uint8)
    for r in range(1, STEPS_R + 1):
        work = (r - slack).astype(np.float32)       # steps of work left at each slack
        # expected value one step later, by what runs in this step (a reclaimed spot job
        # runs nothing), padded with the missed deadline below slack 0
        older_up = np.concatenate((up[:, 1:], up[:, -1:]), axis=1)
        older_down = np.concatenate((down[:, 1:], down[:, -1:]), axis=1)
        gone_up, gone_down = down[:, :1, down_of_up], up[:, :1, up_of_down]
        e_up = np.concatenate((miss_up, gone_up + q * (older_up - gone_up)))
        e_down = np.concatenate((miss_down, gone_down + p * (older_down - gone_down)))

        def run(way: str, e: np.ndarray) -> np.ndarray:
            cost, useful, speed = ways[way]
            v = cost + shifts[way](e)
            # a step that finishes the work costs the part of it used
            done = work <= useful * speed + 1e-6
            if done.any():
                used = np.minimum(1.0, np.maximum(work[done], 0.0) / speed + (1.0 - useful))
                v[done] = (cost * used)[:, None]
            return v

        wait_u, wait_d = run("wait", e_up[:, :, WAIT]), run("wait", e_down[:, :, 0])
        spot_new, spot_cont = run("spot_new", e_up[:, :, SPOT]), run("spot_cont", e_up[:, :, SPOT])
        od_new, od_cont = run("od_new", e_up[:, :, ON_DEMAND]), run("od_cont", e_up[:, :, ON_DEMAND])
        new_up = np.empty_like(up)
        packed = np.zeros((n_j, AGES), np.uint8)
        for m, spot_v, od_v in ((WAIT, spot_new, od_new), (SPOT, spot_cont, od_new),
                                (ON_DEMAND, spot_new, od_cont)):
            best, choice = wait_u, np.zeros((n_j, AGES), np.uint8)
            for code, v in ((SPOT, spot_v), (ON_DEMAND, od_v)):
                better = v < best
                best = np.where(better, v, best)
                choice[better] = code
            new_up[:, :, m] = best
            packed |= choice << (2 * m)
        up_t[r] = packed
        new_down = np.empty_like(down)
        packed = np.zeros((n_j, AGES), np.uint8)
        for j, od_v in enumerate((run("od_new", e_down[:, :, 1]), run("od_cont", e_down[:, :, 1]))):
            go = od_v < wait_d
            new_down[:, :, j] = np.where(go, od_v, wait_d)
            packed |= go.astype(np.uint8) << j
        down_t[r] = packed
        finished = work <= 0
        new_up[finished] = new_down[finished] = 0.0
        up, down = new_up, new_down
    return up_t, down_t


def step_for(r_h: float, interval_h: float = 0.0) -> float | None:
    """The table step (hours) for a job ``r_h`` hours from its deadline that decides every
    ``interval_h`` hours: the smallest ``max(10 min, interval) × 2^k`` (``k ≤ 8``) with
    ``r_h ≤ STEPS_R`` steps (the table never plans to act more often than the job does);
    ``None`` past it."""
    base = max(BASE_STEP_H, float(interval_h)) if math.isfinite(interval_h) else BASE_STEP_H
    for k in range(MAX_DOUBLINGS + 1):
        h = base * 2 ** k
        if r_h <= STEPS_R * h:
            return h
    return None


def _log_rounded(value: float, step: float, floor: float) -> float:
    """``value`` rounded to the nearest point of a geometric grid of ratio ``e^step``."""
    return float(np.exp(round(math.log(max(value, floor)) / step) * step))


def model_for(step_h: float, mean_up_h: float, mean_down_h: float, spot_ratio: float,
              overhead_h: float, spot_speed: float = 1.0, wait_cost: float = WAIT_COST) -> Model:
    """The model of one job's table, rounded so that nearby jobs share it: mean run lengths
    to a 22 % grid, the price ratio and the speed to a 10 % grid, the overhead to 0.1 step."""
    return Model(step_h=step_h,
                 mean_up_steps=_log_rounded(mean_up_h / step_h, MEAN_STEP_LOG, 0.05),
                 mean_down_steps=_log_rounded(mean_down_h / step_h, MEAN_STEP_LOG, 0.05),
                 spot_ratio=_log_rounded(float(spot_ratio), 0.1, 1e-3),
                 overhead_steps=round(overhead_h / step_h, 1),
                 spot_speed=_log_rounded(float(spot_speed), 0.1, 0.05),
                 wait_cost=round(float(wait_cost), 4))


def advise(time_to_deadline_h: np.ndarray, work_h: np.ndarray, running: np.ndarray,
           spot_up: np.ndarray, age_h: np.ndarray, mean_up_h: np.ndarray,
           mean_down_h: np.ndarray, spot_ratio: np.ndarray, overhead_h: np.ndarray,
           spot_speed: np.ndarray | None = None,
           interval_h: np.ndarray | None = None, wait_cost: float = WAIT_COST) -> np.ndarray:
    """The table's choice for each job, ``(n,)`` of :data:`WAIT` / :data:`SPOT` /
    :data:`ON_DEMAND` / :data:`NO_ADVICE`.

    Args (all ``(n,)``):
        time_to_deadline_h: hours to the deadline (``inf``: no deadline, no advice).
        work_h: hours of work left on the on-demand fallback, plus overhead still owed.
        running: what the job runs now, :data:`WAIT` (nothing), :data:`SPOT` or
            :data:`ON_DEMAND`. A spot job whose pool is unavailable counts as reclaimed.
        spot_up: the pool has spot the job may launch (or keep) now.
        age_h: hours the pool has been in its current state (available or not; not a
            positive number: 0).
        mean_up_h, mean_down_h: the pool's mean run lengths, hours (a gang's available
            runs ÷ its nodes); a non-positive or non-finite mean gives no advice.
        spot_ratio: spot cost ÷ on-demand cost per hour of work (``nan``/``inf``: no spot).
        overhead_h: restart overhead of a new instance, hours.
        spot_speed: hours of the fallback's work an hour on spot does (``None``: 1).
        interval_h: hours between the job's decisions (``None``: 10 min); the table's step
            is at least that.
        wait_cost: :attr:`Model.wait_cost` (a scalar).
    """
    n = len(time_to_deadline_h)
    out = np.full(n, NO_ADVICE, np.int8)
    sigma = np.ones(n) if spot_speed is None else np.asarray(spot_speed, dtype=float)
    ok = (np.isfinite(time_to_deadline_h) & np.isfinite(work_h) & (work_h > 0)
          & np.isfinite(mean_up_h) & (mean_up_h > 0) & np.isfinite(mean_down_h)
          & (mean_down_h > 0) & np.isfinite(spot_ratio) & (spot_ratio > 0)
          & np.isfinite(overhead_h) & (overhead_h >= 0) & (time_to_deadline_h > 0)
          & np.isfinite(sigma) & (sigma > 0))
    for i in np.flatnonzero(ok):
        r, c = float(time_to_deadline_h[i]), float(work_h[i])
        h = step_for(r, 0.0 if interval_h is None else float(interval_h[i]))
        if h is None:
            continue
        r_steps = int(math.floor(r / h + 1e-9))
        j = r_steps - int(math.ceil(c / h - 1e-9))
        if j < 0:
            continue        # not even on-demand finishes in time on the grid: the safety net's
        model = model_for(h, float(mean_up_h[i]), float(mean_down_h[i]), float(spot_ratio[i]),
                          float(overhead_h[i]), float(sigma[i]), wait_cost)
        mode = int(running[i])
        if mode == WAIT and j < model.overhead_steps - 1e-9:
            continue        # no launch is in time on the grid either
        up_t, down_t = table(model)
        j = min(j, STEPS_SLACK)
        age = float(age_h[i])
        k = 0 if not age > 0 else AGES - 1 if age >= AGES * h else int(round(age / h))
        k = min(k, AGES - 1)
        if spot_up[i]:
            out[i] = (int(up_t[r_steps, j, k]) >> (2 * mode)) & 3
        else:
            bit = 1 if mode == ON_DEMAND else 0
            out[i] = ON_DEMAND if (int(down_t[r_steps, j, k]) >> bit) & 1 else WAIT
    return out

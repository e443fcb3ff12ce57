"""The simulator: replay a market through a policy on a virtual clock, many runs at once.

Discrete time: tick ``i`` of a run that starts at absolute tick ``s`` covers market hours
``[(s+i)·g, (s+i+1)·g)``. At the start of every tick:

1. a spot instance whose offer is unavailable now is **reclaimed**. On an offer whose
   interruption notice is at least the job's ``final_checkpoint_s`` the job takes a final
   checkpoint and keeps all its progress (the notice's seconds are not billed: they are far
   shorter than a tick); without a notice (``interruption_notice_s`` 0, as on Vast.ai), with
   one too short, or with none known, it keeps the progress of its last periodic checkpoint
   (all of it with continuous checkpoints, ``checkpoint_interval_h = 0``). Periodic
   checkpoints are taken every ``checkpoint_interval_h`` clock hours of work on the instance
   (its restart overhead excluded), as the daemon syncs them on a clock; on an offer of speed
   ``s`` a reclaim thus loses the clock hours since the last one × ``s`` reference-hours;
2. the policy sees a :class:`~policies.views.JobView` and a :class:`~policies.views.MarketView`
   of all runs and returns a :class:`~policies.views.Decision` (the same call the daemon makes);
3. a different offer means a new instance: it pays the **restart overhead** (launch, setup,
   restore; plus ``move_extra_h`` when it leaves a running instance) before making progress;
   ``NO_OFFER`` stops the instance (the job checkpoints first);
4. the instance is billed its price for the tick (only the part used on the final tick);
   its productive hours advance the job's progress at the offer's **speed** (reference-hours
   per hour, ``SimMarket.speed``; 1 when the market has none), the same speed the policy saw;
5. a run whose spend reaches 100 % of its job or user budget is **stopped** (checkpoint and
   stop, as the daemon's budget step does, whatever the policy): it does not finish and its
   cost is what it spent up to there. This applies to the baselines too, so with a budget
   they are compared as the daemon would run them.

A **gang** job (``SimJob.nodes`` = ``N`` > 1) runs ``N`` instances of one offer: a spot offer is
available to it only while the trace counts at least ``N`` instances there
(:meth:`SimMarket.available_for`), so it is reclaimed (step 1) as soon as the count drops below
``N``; on-demand always has room. It is billed ``N ×`` the price, and the policy sees
``nodes = N`` (it prices and risks the gang itself, :mod:`policies.risk`).

Nothing is started and no clock is read. All runs advance together as numpy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from core.models.specs import MAX_NODES
from policies.budget import crossed
from policies.views import NO_OFFER, NO_ZONE, Decision, JobView, MarketView, Reason
from scheduler.simulator.market import SimMarket, SimulationError

Policy = Callable[[JobView, MarketView], Decision]


@dataclass(frozen=True)
class SimJob:
    """The simulated job. Hours of market time; USD.

    - **compute_h**: compute the job needs (> 0), hours of one A100-80GB when the market has
      speeds (progress and checkpoints are counted in them): ``schedctl simulate`` converts
      the spec's (``--compute-hours``, ``work.total`` or ``expected_hours`` on its
      ``reference_gpu``) with :func:`policies.throughput.spec_reference_hours`.
    - **deadline_h**: hours after the start (``None``: no deadline).
    - **restart_overhead_h**: launch + setup + restore of each new instance.
    - **checkpoint_interval_h**: clock hours of work on an instance between checkpoints (0:
      continuous, nothing is lost beyond the overhead at a reclaim), the policy's
      :attr:`~policies.views.JobView.checkpoint_interval_h`; progress since the last
      checkpoint is lost at a reclaim or a move. Without speeds an hour is a reference-hour
      and checkpoints fall at multiples of the interval in progress, as they always did (the
      same instants, except after a final checkpoint taken at a notice: the next periodic one
      then comes at the next multiple, not a full interval later).
    - **move_extra_h**: extra time of a voluntary move (checkpoint size ÷ bandwidth).
    - **budget_usd** / **user_budget_usd**: limits (``inf`` none); the user has only this job.
      Reaching 100 % of either stops the run (see step 5).
    - **final_checkpoint_s**: seconds the job needs from a preemption notice to a committed
      checkpoint, compared with each offer's ``interruption_notice_s`` (default 0: any notice
      is enough).
    - **nodes**: instances run at once, a gang of one offer (1..64, default 1); costs, spot and
      on-demand hours are of the whole gang (hours: per node, as ``Placement.billed_hours``).
    """

    compute_h: float
    deadline_h: float | None = None
    restart_overhead_h: float = 0.2
    checkpoint_interval_h: float = 0.0
    move_extra_h: float = 0.0
    budget_usd: float = math.inf
    user_budget_usd: float = math.inf
    final_checkpoint_s: float = 0.0
    nodes: int = 1

    def __post_init__(self) -> None:
        if not self.compute_h > 0:
            raise SimulationError(f"compute_h must be > 0, got {self.compute_h!r}")
        if not (isinstance(self.nodes, int) and 1 <= self.nodes <= MAX_NODES):
            raise SimulationError(f"nodes must be an integer in 1..{MAX_NODES}, got {self.nodes!r}")
        for name in ("restart_overhead_h", "checkpoint_interval_h", "move_extra_h",
                     "final_checkpoint_s"):
            if getattr(self, name) < 0:
                raise SimulationError(f"{name} must be >= 0, got {getattr(self, name)!r}")


@dataclass
class SimResult:
    """Per-run outcomes, arrays ``(n,)``; hours from each run's start; USD.

    ``finish_h`` is ``nan`` for a run that did not finish (budget stop or tick limit);
    ``migrations`` counts instance starts after the first (after a reclaim or a voluntary move);
    ``alerts`` lists ``(run, scope, threshold, at_h)`` budget alerts.
    """

    start_h: np.ndarray
    deadline_h: np.ndarray
    cost_usd: np.ndarray
    finish_h: np.ndarray
    spot_h: np.ndarray
    on_demand_h: np.ndarray
    migrations: np.ndarray
    preemptions: np.ndarray
    budget_stopped: np.ndarray
    alerts: list[tuple[int, str, float, float]] = field(default_factory=list)

    @property
    def finished(self) -> np.ndarray:
        return np.isfinite(self.finish_h)

    @property
    def met_deadline(self) -> np.ndarray:
        """Finished no later than the deadline (True when there is none and it finished)."""
        return self.finished & (np.nan_to_num(self.finish_h, nan=np.inf) <= self.deadline_h + 1e-9)


def notice_saves_progress(notice_s: np.ndarray, final_checkpoint_s: float, m: int) -> np.ndarray:
    """``(m,)`` bool: a reclaim of the offer comes with a notice long enough for the final
    checkpoint (``notice_s`` > 0 and >= ``final_checkpoint_s``; ``nan`` = unknown = no; an
    empty ``notice_s`` = all unknown)."""
    if notice_s.size == 0:
        return np.zeros(m, bool)
    with np.errstate(invalid="ignore"):
        return (notice_s > 0) & (notice_s >= final_checkpoint_s)


class _Runs:
    """Mutable state of ``n`` runs."""

    def __init__(self, market: SimMarket, job: SimJob, starts: np.ndarray, deadlines: np.ndarray):
        n = len(starts)
        self.m, self.job, self.starts, self.deadlines = market, job, starts, deadlines
        self.progress = np.zeros(n)
        self.ckpt = np.zeros(n)
        # clock hours of work on the current instance since its last checkpoint (with speeds)
        self.age = np.zeros(n)
        self.cur = np.full(n, NO_OFFER)
        self.prev = np.full(n, NO_OFFER)
        self.owed = np.zeros(n)
        self.cost = np.zeros(n)
        self.spot_h, self.od_h = np.zeros(n), np.zeros(n)
        self.launches, self.preempts = np.zeros(n, int), np.zeros(n, int)
        self.done, self.stopped = np.zeros(n, bool), np.zeros(n, bool)
        self.finish = np.full(n, np.nan)
        self.lost_zone = np.full(n, NO_ZONE)
        self.since_pre, self.since_start = np.full(n, np.inf), np.full(n, np.inf)
        self.corr = market.correlation_at(starts) if len(market.table.zone_names) > 1 else None
        self.alerts: list[tuple[int, str, float, float]] = []
        self.warned = notice_saves_progress(market.table.interruption_notice_s,
                                            job.final_checkpoint_s, len(market.table))

    def reclaim(self, avail: np.ndarray) -> None:
        """Step 1: spot instances whose offer is gone are reclaimed."""
        rows = np.arange(len(self.cur))
        on = self.cur != NO_OFFER
        col = np.maximum(self.cur, 0)
        hit = on & self.m.table.is_spot[col] & ~avail[rows, col]
        self.preempts += hit
        self.lost_zone = np.where(hit, self.m.table.zone[col], self.lost_zone)
        self.since_pre = np.where(hit, 0.0, self.since_pre)
        final = hit & self.warned[col]
        self.ckpt = np.where(final, self.progress, self.ckpt)
        self.progress = np.where(hit, self.ckpt, self.progress)
        self.age = np.where(hit, 0.0, self.age)
        self.cur = np.where(hit, NO_OFFER, self.cur)
        self.owed = np.where(hit, 0.0, self.owed)
        self.since_start = np.where(hit, np.inf, self.since_start)

    def views(self, i: int, avail: np.ndarray, price: np.ndarray) -> tuple[JobView, MarketView]:
        """Step 2's inputs at local tick ``i``."""
        job, g = self.job, self.m.tick_h
        k = self.starts + i
        n = len(k)
        jobs = JobView.build(
            n, compute_h=job.compute_h, remaining_compute_h=job.compute_h - self.progress,
            elapsed_h=i * g, time_to_deadline_h=self.deadlines - i * g, current=self.cur,
            overhead_left_h=self.owed, restart_overhead_h=job.restart_overhead_h,
            decision_interval_h=g, move_extra_h=job.move_extra_h,
            checkpoint_interval_h=job.checkpoint_interval_h,
            checkpoint_age_h=self.progress - self.ckpt if self.m.speed is None else self.age,
            last_preempted_zone=self.lost_zone,
            final_checkpoint_s=job.final_checkpoint_s,
            since_preemption_h=self.since_pre, since_start_h=self.since_start,
            previous=self.prev, spent_usd=self.cost, budget_usd=job.budget_usd,
            user_spent_usd=self.cost, user_budget_usd=job.user_budget_usd, nodes=job.nodes,
        )
        stats = self.m.offer_stats
        speed = {} if self.m.speed is None else {"speed": self.m.speed}
        market = MarketView(
            offers=self.m.table, price_usd_per_hour=price, available=avail,
            offer_stats=type(stats)(**{f: getattr(stats, f)[k] for f in stats.__dataclass_fields__}),
            pool_stats=self.m.pool_stats.take(k), zone_correlation=self.corr, **speed,
        )
        return jobs, market

    def apply(self, decision: Decision, avail: np.ndarray, active: np.ndarray) -> None:
        """Step 3: start, switch or stop instances as decided."""
        target = np.where(active, decision.offer, self.cur)
        rows = np.arange(len(target))
        bad = (target != NO_OFFER) & ~avail[rows, np.maximum(target, 0)] & (target != self.cur)
        if bad.any():
            raise SimulationError(f"policy chose an unavailable offer for run {np.flatnonzero(bad)[0]}")
        self.stopped |= active & (decision.reason == Reason.BUDGET_STOP)
        switch = active & (target != self.cur)
        leaving = switch & (self.cur != NO_OFFER)
        self.progress = np.where(leaving, self.ckpt, self.progress)
        self.age = np.where(leaving, 0.0, self.age)
        self.prev = np.where(leaving, self.cur, self.prev)
        start = switch & (target != NO_OFFER)
        extra = np.where(leaving, self.job.move_extra_h, 0.0)
        self.owed = np.where(start, self.job.restart_overhead_h + extra,
                             np.where(switch, 0.0, self.owed))
        self.launches += start
        self.since_start = np.where(start, 0.0, np.where(switch, np.inf, self.since_start))
        self.cur = target

    def advance(self, i: int, price: np.ndarray) -> None:
        """Step 4: progress and billing of one tick."""
        g, job = self.m.tick_h, self.job
        rows = np.arange(len(self.cur))
        running = (self.cur != NO_OFFER) & ~self.done & ~self.stopped
        use_owed = np.minimum(g, self.owed)
        need = job.compute_h - self.progress
        col = np.maximum(self.cur, 0)
        # speed 1 (no speeds) multiplies and divides exactly: results as before speeds existed
        rate = 1.0 if self.m.speed is None else self.m.speed[col]
        work = (g - use_owed) * rate
        fin = running & (work >= need - 1e-12)
        used = np.where(running, np.where(fin, use_owed + need / rate, g), 0.0)
        prev_cost = self.cost.copy()
        paid = price[rows, col] if self.job.nodes == 1 else price[rows, col] * self.job.nodes
        self.cost = self.cost + paid * used
        spot = self.m.table.is_spot[col]
        self.spot_h += np.where(spot, used, 0.0)
        self.od_h += np.where(spot, 0.0, used)
        before = self.progress
        # without speeds, the sum in its old order (float addition is not associative)
        advanced = self.progress + g - use_owed if self.m.speed is None else self.progress + work
        self.progress = np.where(running, np.where(fin, job.compute_h, advanced), self.progress)
        self.owed = np.where(running, self.owed - use_owed, self.owed)
        tau = job.checkpoint_interval_h
        if tau <= 0:
            self.ckpt = np.maximum(self.ckpt, self.progress)
        elif self.m.speed is None:
            # A final checkpoint taken at a notice may lie between two periodic ones.
            self.ckpt = np.maximum(self.ckpt, np.floor(self.progress / tau + 1e-9) * tau)
        else:
            self._periodic(before, np.where(running, used - use_owed, 0.0), rate, tau)
        self.finish = np.where(fin, i * g + used, self.finish)
        self.done |= fin
        self.cur = np.where(fin, NO_OFFER, self.cur)
        self.since_pre += g
        self.since_start += g
        self._alerts(i, prev_cost)
        self._budget_stop()

    def _periodic(self, before: np.ndarray, worked_h: np.ndarray, rate: np.ndarray,
                  tau: float) -> None:
        """Periodic checkpoints of a tick with speeds: one every ``tau`` clock hours of work on
        the instance; the last one this tick saves the progress made up to its instant.

        Args: progress at the tick's start, ``(n,)`` reference-hours; clock hours worked this
        tick (after the overhead), ``(n,)``; the current offers' speeds; ``tau`` hours.
        """
        total = self.age + worked_h
        taken = np.floor(total / tau + 1e-9)
        crossed = taken >= 1           # the age is below tau at a tick's start
        at_h = taken * tau - self.age  # clock hours into this tick's work
        self.ckpt = np.where(crossed, np.maximum(self.ckpt, before + at_h * rate), self.ckpt)
        self.age = np.where(crossed, np.maximum(total - taken * tau, 0.0), total)

    def _budget_stop(self) -> None:
        """Step 5: spend at 100 % of a budget stops the run, as the daemon does (the policy
        need not ask: the baselines know nothing of budgets)."""
        limit = min(self.job.budget_usd, self.job.user_budget_usd)
        if not math.isfinite(limit):
            return
        over = ~self.done & ~self.stopped & (self.cost >= limit * (1 - 1e-12))
        self.stopped |= over
        self.progress = np.where(over, self.ckpt, self.progress)
        self.age = np.where(over, 0.0, self.age)
        self.cur = np.where(over, NO_OFFER, self.cur)

    def _alerts(self, i: int, prev_cost: np.ndarray) -> None:
        at = (i + 1) * self.m.tick_h
        for scope, limit in (("job", self.job.budget_usd), ("user", self.job.user_budget_usd)):
            if math.isfinite(limit):
                for a in crossed(prev_cost, self.cost, np.full(len(self.cost), limit), scope):
                    self.alerts.append((a.job, scope, a.threshold, at))


def simulate(policy: Policy, market: SimMarket, job: SimJob, start_ticks: np.ndarray,
             deadline_h: np.ndarray | None = None, max_ticks: int | None = None) -> SimResult:
    """Run ``policy`` on ``market`` for ``n`` runs of ``job`` starting at the given ticks.

    Args:
        policy: ``(JobView, MarketView) -> Decision`` (e.g. :func:`policies.decisions.decide`).
        market: from :func:`~scheduler.simulator.market.build_sim_market`; it must cover
            ``max(start_ticks) + max_ticks`` ticks.
        job: the job; ``deadline_h`` (``(n,)``, hours after each start) overrides its deadline.
        start_ticks: ``(n,)`` absolute start ticks.
        max_ticks: ticks to simulate at most (default: until the market's end).

    Returns:
        A :class:`SimResult`.

    Raises:
        SimulationError: the market is too short for the runs, a run starts before the
            market's ``known_before_tick``, or the policy chose an offer that is unavailable.
    """
    starts = np.asarray(start_ticks, dtype=np.int64)
    n = len(starts)
    default = np.inf if job.deadline_h is None else job.deadline_h
    deadlines = np.broadcast_to(np.asarray(default if deadline_h is None else deadline_h,
                                           dtype=float), (n,)).copy()
    if n and int(starts.min()) < market.known_before_tick:
        raise SimulationError(
            f"a run starts at tick {int(starts.min())}, before tick {market.known_before_tick} "
            "whose history the market's interruption risks were derived from (that would show "
            "the policy the future): build the market with known_before_tick <= the first start")
    limit = market.ticks - int(starts.max(initial=0))
    max_ticks = limit if max_ticks is None else max_ticks
    if max_ticks > limit or max_ticks <= 0:
        raise SimulationError(f"the market covers {limit} ticks after the last start; "
                              f"{max_ticks} requested")
    runs = _Runs(market, job, starts, deadlines)
    for i in range(max_ticks):
        active = ~runs.done & ~runs.stopped
        if not active.any():
            break
        k = starts + i
        avail, price = market.available_for(job.nodes, k), market.price[k]
        runs.reclaim(avail)
        decision = policy(*runs.views(i, avail, price))
        runs.apply(decision, avail, active)
        runs.advance(i, price)
    return SimResult(
        start_h=starts * market.tick_h, deadline_h=deadlines, cost_usd=runs.cost,
        finish_h=runs.finish, spot_h=runs.spot_h, on_demand_h=runs.od_h,
        migrations=np.maximum(runs.launches - 1, 0), preemptions=runs.preempts,
        budget_stopped=runs.stopped, alerts=runs.alerts,
    )

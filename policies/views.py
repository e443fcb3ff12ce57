"""Plain data the policies decide on: jobs, offers, the market now, and decisions.

Every per-job field is a numpy array of shape ``(n,)`` and every per-(job, offer) field has shape
``(n, m)`` (or ``(m,)``, broadcast to every job). One call therefore decides for one job (``n = 1``:
the daemon's reconcile step), for many pending jobs at once, or for the simulator's ``n`` replayed
runs of the same job. Nothing here reads a clock or does I/O.

Times are hours (float) measured by the caller: the daemon passes wall hours, the simulator
virtual market hours. Prices are USD per hour for the whole instance.

Two kinds of hours. **Clock hours** (plain "hours") are time on an instance or on the clock,
in the caller's time as above: deadlines, decision intervals, overheads (launch, setup, restore,
transfer), checkpoint intervals and the progress lost at a reclaim, billed hours, runs of spot
capacity. **Reference-hours** are work: what one GPU of the job's reference model
(``JobSpec.reference_gpu``) computes in one hour; ``JobView.compute_h`` and
``remaining_compute_h`` are reference-hours. ``MarketView.speed[j]`` converts: one hour of
progress on offer ``j`` does ``speed[j]`` reference-hours, so finishing uninterrupted there
takes ``remaining_compute_h / speed[j]`` hours. Without speeds (the default) every offer does
one reference-hour per hour and the two kinds coincide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from enum import IntEnum

import numpy as np

from core.models import Market, Offer

NO_OFFER = -1
"""Offer index meaning "run nothing": wait (no instance) or stop the current one."""

NO_ZONE = -1


class Reason(IntEnum):
    """Why a decision was taken, one code per job (see :data:`REASON_TEXT`)."""

    CONTINUE = 0
    SPOT = 1
    ON_DEMAND_NEEDED = 2
    ON_DEMAND_CHEAPER = 3
    WAIT_FOR_SPOT = 4
    SAFETY_NET = 5
    MIGRATE_PRICE = 6
    MIGRATE_TO_SPOT = 7
    NOTHING_AVAILABLE = 8
    BUDGET_STOP = 9
    DEADLINE_INFEASIBLE = 10
    DONE = 11


REASON_TEXT = {
    Reason.CONTINUE: "keep the current instance",
    Reason.SPOT: "spot pays: lowest risk-aware effective cost",
    Reason.ON_DEMAND_NEEDED: "on-demand: the slack left is the end-game reserve, gaps in spot are filled",
    Reason.ON_DEMAND_CHEAPER: "on-demand: lower effective cost than any spot offer",
    Reason.WAIT_FOR_SPOT: "wait for spot: the deadline leaves slack to spare",
    Reason.SAFETY_NET: "on-demand safety net: one more risk would miss the deadline",
    Reason.MIGRATE_PRICE: "migrate: saving over the remaining runtime exceeds the move cost",
    Reason.MIGRATE_TO_SPOT: "leave on-demand for spot: expected saving exceeds the move cost",
    Reason.NOTHING_AVAILABLE: "no eligible offer is available",
    Reason.BUDGET_STOP: "budget exhausted: checkpoint and stop",
    Reason.DEADLINE_INFEASIBLE: "deadline no longer feasible: on-demand to finish as early as possible",
    Reason.DONE: "job finished",
}


def _col(values: Sequence[float] | np.ndarray, dtype=float) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, dtype=dtype))


def _codes(values: Sequence[str]) -> tuple[np.ndarray, tuple[str, ...]]:
    """Integer codes of ``values`` (first-seen order) and the vocabulary."""
    vocab: dict[str, int] = {}
    codes = [vocab.setdefault(v, len(vocab)) for v in values]
    return _col(codes, int), tuple(vocab)


@dataclass(frozen=True)
class OfferTable:
    """Static columns of ``m`` offers (what does not change between decisions).

    - **keys**: series keys (``provider/region/zone/instance_type/market``), ``(m,)``.
    - **zone**: index into ``zone_names`` (``provider/region/zone``), ``(m,)`` int.
    - **region**: index into ``region_names`` (``provider/region``), ``(m,)`` int.
    - **is_spot**: ``(m,)`` bool; on-demand offers are never preempted.
    - **interruption_risk**: monthly interruption frequency in [0, 1] (0 for on-demand), ``(m,)``.
    - **on_demand_price_usd_per_hour**: the same type's on-demand price (``nan`` unknown), ``(m,)``.
    - **interruption_notice_s**: seconds of warning a reclaimed spot instance gets
      (``Offer.interruption_notice_s``: 0 none, as on Vast.ai; ``nan`` unknown), ``(m,)``;
      empty when the table was built without it (all unknown).
    - **hardware**: ``gpu_count``, ``vram_gib`` (per GPU), ``vcpus``, ``memory_gib``, ``(m,)``.
    - **capacity**: instances of the offer launchable now (``Offer.capacity``; ``nan``
      unknown), ``(m,)``; empty when the table was built without it (all unknown). A gang of
      ``N`` nodes fits an offer only where it is unknown or ``>= N``.
    - **labels**: integer codes of the raw ``provider``, ``region_label``, ``zone_label`` and the
      lower-cased ``gpu_model`` of each offer, with their vocabularies in ``vocab`` (for the
      vectorised constraints of :mod:`policies.eligibility`).
    """

    keys: tuple[str, ...]
    zone: np.ndarray
    zone_names: tuple[str, ...]
    region: np.ndarray
    region_names: tuple[str, ...]
    is_spot: np.ndarray
    interruption_risk: np.ndarray
    on_demand_price_usd_per_hour: np.ndarray
    gpu_count: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    vram_gib: np.ndarray = field(default_factory=lambda: np.zeros(0))
    vcpus: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    memory_gib: np.ndarray = field(default_factory=lambda: np.zeros(0))
    interruption_notice_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    capacity: np.ndarray = field(default_factory=lambda: np.zeros(0))
    labels: dict[str, np.ndarray] = field(default_factory=dict)
    vocab: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def from_offers(cls, offers: Sequence[Offer]) -> OfferTable:
        """Columns of ``offers`` (order kept: offer ``i`` is row ``i``)."""
        zone, zone_names = _codes([f"{o.provider}/{o.region}/{o.zone}" for o in offers])
        region, region_names = _codes([f"{o.provider}/{o.region}" for o in offers])
        labels, vocab = {}, {}
        for name, values in (("provider", [o.provider for o in offers]),
                             ("region_label", [o.region for o in offers]),
                             ("zone_label", [o.zone for o in offers]),
                             ("gpu_model", [o.gpu_model.lower() for o in offers])):
            labels[name], vocab[name] = _codes(values)
        od = [np.nan if o.on_demand_price_usd_per_hour is None else o.on_demand_price_usd_per_hour
              for o in offers]
        return cls(
            keys=tuple(o.key.series() for o in offers),
            zone=zone, zone_names=zone_names, region=region, region_names=region_names,
            is_spot=_col([o.market is Market.SPOT for o in offers], bool),
            interruption_risk=_col([o.interruption_risk for o in offers]),
            on_demand_price_usd_per_hour=_col(od),
            gpu_count=_col([o.gpu_count for o in offers], int),
            vram_gib=_col([o.vram_gib for o in offers]),
            vcpus=_col([o.vcpus for o in offers], int),
            memory_gib=_col([o.memory_gib for o in offers]),
            interruption_notice_s=_col([np.nan if o.interruption_notice_s is None
                                        else o.interruption_notice_s for o in offers]),
            capacity=_col([np.nan if o.capacity is None else o.capacity for o in offers]),
            labels=labels, vocab=vocab,
        )


@dataclass(frozen=True)
class AvailabilityStats:
    """What the past says about spot capacity, per (job, offer) ``(n, m)`` or per job ``(n,)``.

    Built by :func:`policies.availability.availability_stats` from observed availability samples
    (the replay traces in the simulator; polled offers and preemption notices in the daemon).

    - **up_age_h**: hours the capacity has been continuously available (0 when it is not, or
      just came back); ``inf`` for on-demand.
    - **down_age_h**: hours it has been continuously unavailable (0 when available).
    - **mean_up_h** / **mean_down_h**: estimated mean length of an available / unavailable run.
    - **frac**: estimated long-run fraction of time available, in [0, 1].
    """

    up_age_h: np.ndarray
    down_age_h: np.ndarray
    mean_up_h: np.ndarray
    mean_down_h: np.ndarray
    frac: np.ndarray

    def take(self, rows: np.ndarray) -> AvailabilityStats:
        """The stats of the given job rows (for per-job arrays)."""
        return AvailabilityStats(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})


@dataclass(frozen=True)
class MarketView:
    """The market as one decision sees it.

    - **offers**: the static :class:`OfferTable` (``m`` rows).
    - **price_usd_per_hour**: price now, ``(n, m)`` or ``(m,)``.
    - **available**: ``(n, m)`` or ``(m,)`` bool: the offer may be launched now for that job
      (capacity exists *and* the job's constraints admit it).
    - **offer_stats**: :class:`AvailabilityStats` per offer, ``(n, m)`` or ``(m,)``.
    - **pool_stats**: :class:`AvailabilityStats` of "any of the job's spot offers", ``(n,)``.
      A job with no spot offer at all should get ``frac = 0`` (it cannot wait for spot).
    - **zone_correlation**: ``(z, z)`` (or per job ``(n, z, z)``) correlation of zone
      availability over ``offers.zone_names`` (:func:`policies.zones.zone_correlation`), or
      ``None`` when unknown.
    - **speed**: throughput of each offer relative to the job's reference (reference-hours of
      work per clock hour on the whole offer: the job's rate there ÷ its rate on one reference
      GPU, from :func:`policies.throughput.estimate_rates`), ``(m,)`` or per job ``(n, m)``.
      Empty (the default): every offer runs at the reference speed, 1. A speed that is not a
      positive number makes that offer unusable (infinite cost). Attach per-job speeds to a
      shared view with :func:`with_speed`.
    """

    offers: OfferTable
    price_usd_per_hour: np.ndarray
    available: np.ndarray
    offer_stats: AvailabilityStats
    pool_stats: AvailabilityStats
    zone_correlation: np.ndarray | None = None
    speed: np.ndarray = field(default_factory=lambda: np.zeros(0))


def with_speed(market: MarketView, speed: np.ndarray | Sequence[float] | None) -> MarketView:
    """``market`` with ``speed`` (``(m,)`` or ``(n, m)``; ``None`` or empty: the reference speed
    everywhere), sharing every other array (no copy of the view).

    Raises:
        ValueError: ``speed`` does not have ``m`` columns.
    """
    speed = np.zeros(0) if speed is None else np.asarray(speed, dtype=float)
    m = len(market.offers)
    if speed.size and (speed.ndim not in (1, 2) or speed.shape[-1] != m):
        raise ValueError(f"speed of shape {speed.shape} does not match {m} offers")
    return replace(market, speed=speed)


@dataclass(frozen=True)
class JobView:
    """The state of ``n`` jobs at one decision, every field an ``(n,)`` array.

    - **compute_h**: total compute the job needs, in reference-hours (``nan`` unknown:
      deadline reasoning is then off and placement amortises over ``default_runtime_h``).
    - **remaining_compute_h**: compute still to do, reference-hours (``nan`` unknown).
    - **elapsed_h**: hours since submission.
    - **time_to_deadline_h**: hours from now to the deadline (``inf`` when none).
    - **current**: offer index of the running instance, :data:`NO_OFFER` when none.
    - **overhead_left_h**: restart overhead still to pay on the current instance (0 if warm).
    - **restart_overhead_h**: launch + setup + restore time of a new instance.
    - **move_extra_h**: extra time of a voluntary move: checkpoint size ÷ bandwidth.
    - **checkpoint_interval_h**: clock hours of progress between checkpoints (0: continuous).
    - **checkpoint_age_h**: clock hours of progress on the current instance since the last
      committed checkpoint (lost if preempted; ``× speed`` of that offer in reference-hours).
    - **final_checkpoint_s**: seconds the job needs, from a preemption notice, to save and
      commit a final checkpoint (the daemon: the spec's ``grace_s``); a notice at least this
      long loses no progress (:func:`policies.risk.loss_per_reclaim_h`). ``inf``: it cannot.
    - **last_preempted_zone**: zone index of the last spot preemption (:data:`NO_ZONE` none).
    - **since_preemption_h**: hours since that preemption (``inf`` none).
    - **since_start_h**: hours since the current instance started (``inf`` when none).
    - **previous**: offer index the job last *chose to leave* (a move or a stop, not a reclaim):
      the ping-pong guard.
    - **spent_usd** / **budget_usd**: spend so far and the job's limit (``inf`` none).
    - **user_spent_usd** / **user_budget_usd**: the same for the job's user (all their jobs).
    - **decision_interval_h**: time until the next decision (poll interval / simulator tick).
    - **nodes**: instances the job runs on at once (a gang of ``N`` nodes of one offer; 1 for
      a single instance). A gang pays ``N ×`` the offer's price and is interrupted when any
      node is: its hazard is ``N ×`` a node's (:func:`policies.risk.gang_nodes`). Empty: 1.
    """

    compute_h: np.ndarray
    remaining_compute_h: np.ndarray
    elapsed_h: np.ndarray
    time_to_deadline_h: np.ndarray
    current: np.ndarray
    overhead_left_h: np.ndarray
    restart_overhead_h: np.ndarray
    decision_interval_h: np.ndarray
    move_extra_h: np.ndarray = field(default_factory=lambda: np.zeros(0))
    checkpoint_interval_h: np.ndarray = field(default_factory=lambda: np.zeros(0))
    checkpoint_age_h: np.ndarray = field(default_factory=lambda: np.zeros(0))
    final_checkpoint_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    last_preempted_zone: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    since_preemption_h: np.ndarray = field(default_factory=lambda: np.zeros(0))
    since_start_h: np.ndarray = field(default_factory=lambda: np.zeros(0))
    previous: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    spent_usd: np.ndarray = field(default_factory=lambda: np.zeros(0))
    budget_usd: np.ndarray = field(default_factory=lambda: np.zeros(0))
    user_spent_usd: np.ndarray = field(default_factory=lambda: np.zeros(0))
    user_budget_usd: np.ndarray = field(default_factory=lambda: np.zeros(0))
    nodes: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __len__(self) -> int:
        return int(self.compute_h.shape[0])

    @classmethod
    def build(cls, n: int = 1, **values) -> JobView:
        """A view of ``n`` jobs; each value is a scalar (same for all) or an ``(n,)`` sequence.

        Defaults: no deadline, no instance, 0 overheads, continuous checkpoints, a final
        checkpoint in no time, no preemption, no budget, one node. Raises ``TypeError`` for an unknown field name.
        """
        defaults = {
            "compute_h": np.nan, "remaining_compute_h": np.nan, "elapsed_h": 0.0,
            "time_to_deadline_h": np.inf, "current": NO_OFFER, "overhead_left_h": 0.0,
            "restart_overhead_h": 0.0, "decision_interval_h": 0.0, "move_extra_h": 0.0,
            "checkpoint_interval_h": 0.0, "checkpoint_age_h": 0.0, "final_checkpoint_s": 0.0,
            "last_preempted_zone": NO_ZONE,
            "since_preemption_h": np.inf, "since_start_h": np.inf, "previous": NO_OFFER,
            "spent_usd": 0.0, "budget_usd": np.inf, "user_spent_usd": 0.0, "user_budget_usd": np.inf,
            "nodes": 1.0,
        }
        unknown = set(values) - set(defaults)
        if unknown:
            raise TypeError(f"JobView has no field(s) {sorted(unknown)}")
        ints = {"current", "last_preempted_zone", "previous"}
        out = {}
        for name, default in (defaults | values).items():
            dtype = int if name in ints else float
            out[name] = np.array(np.broadcast_to(np.asarray(default, dtype=dtype), (n,)))
        return cls(**out)


@dataclass(frozen=True)
class Decision:
    """What each of ``n`` jobs should run on during the next interval.

    - **offer**: ``(n,)`` offer index; equal to ``JobView.current`` means keep it;
      :data:`NO_OFFER` means run nothing (wait, or checkpoint and stop the current instance).
    - **reason**: ``(n,)`` :class:`Reason` codes.
    """

    offer: np.ndarray
    reason: np.ndarray

    def explain(self, i: int = 0) -> str:
        """The reason of job ``i`` in words."""
        return REASON_TEXT[Reason(int(self.reason[i]))]


@dataclass(frozen=True)
class MigrationDecision:
    """For ``n`` running jobs: whether to move, where, and the money behind it.

    - **move**: ``(n,)`` bool. **target**: ``(n,)`` offer index (the current one when not
      moving, :data:`NO_OFFER` to stop). **reason**: ``(n,)`` :class:`Reason`.
    - **saving_usd**: expected saving of the move over the remaining runtime (USD, ``(n,)``).
    - **move_cost_usd**: expected cost of moving: overheads billed, lost progress (USD, ``(n,)``).
    """

    move: np.ndarray
    target: np.ndarray
    reason: np.ndarray
    saving_usd: np.ndarray
    move_cost_usd: np.ndarray

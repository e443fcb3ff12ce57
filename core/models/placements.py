"""Placements: one attempt of a job on one offer, its held price series and its bill."""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import Field

from core.models.base import StrictModel, utcnow
from core.models.offers import Offer


class PlacementEnd(str, Enum):
    """Why a placement ended. ``moved``: the scheduler chose to leave the offer (a
    price-driven migration, or its price rose above the job's ``max_price_usd_per_hour``;
    after a committed checkpoint); ``stopped``: a budget stop, or an idle stop
    (``stop_when_idle``)."""

    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"
    LAUNCH_FAILED = "launch-failed"
    MOVED = "moved"
    STOPPED = "stopped"


# Price changes kept per placement. A spot price changes a few times a day on real clouds, so
# this covers days of one placement; past it the two oldest segments are merged into one at
# their time-weighted mean price, which keeps the bill exact (see ``Placement.add_price_change``;
# the detail stays in price history). Small because every pass reads and parses every active
# job: 200 changes made a job ~5x slower to parse (455 vs 90 us) and its cost ~50x slower.
MAX_PRICE_CHANGES = 16


class PriceChange(StrictModel):
    """From ``at`` (aware UTC, wall time) on, the held offer's price is ``price_usd_per_hour``
    (USD per market hour), as the poller recorded it in price history."""

    at: datetime
    price_usd_per_hour: float = Field(ge=0)


class GangNode(StrictModel):
    """One node of a gang placement: its rank (0 is the node ``MASTER_ADDR`` points at), the
    client token of its launch (``{placement token}-n{rank}``) and, once launched, its
    instance and when the provider launched it (aware UTC)."""

    rank: int = Field(ge=0, le=63)
    client_token: str
    instance_id: str | None = None
    launched_at: datetime | None = None


def node_token(placement_token: str, rank: int) -> str:
    """The client token of rank ``rank``'s launch within a gang placement (≤ 64 chars)."""
    return f"{placement_token}-n{rank}"


class Placement(StrictModel):
    """One attempt of a job on one offer.

    ``client_token`` makes the launch idempotent (``{job_id}-{attempt}``). ``time_scale`` is
    market seconds per wall second (1 on real clouds; >1 on a replayed market): an hour billed
    is a market hour, ``wall seconds × time_scale / 3600``.

    ``price_changes`` is the held offer's price series while it runs, oldest first: the
    offer's price at the decision (``offer.price_usd_per_hour``) holds until the first change.
    The controller appends the changes the poller recorded in price history (AWS and Alibaba
    stamp each spot price with the time it took effect; a replayed market with the wall time
    its clock reached the step). Placements stored before it existed have none: their price
    is the decision's, as before. At most :data:`MAX_PRICE_CHANGES` entries.

    A gang (``spec.resources.nodes`` > 1) lists its nodes in ``nodes``, one per rank, all on
    ``offer``; ``instance_id`` is set to rank 0's instance only once every node is launched
    (until then the placement is still launching), and ``started_at`` is the first node's
    launch. A one-node placement has no ``nodes``: ``instance_id`` and ``client_token`` are
    its node's. Its cost counts every launched node (:meth:`cost_usd`).
    """

    attempt: int = Field(ge=1)
    offer: Offer
    client_token: str
    decided_at: datetime
    instance_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    end_reason: PlacementEnd | None = None
    time_scale: float = Field(default=1.0, gt=0)
    progress_at_start_h: float = Field(
        default=0.0, ge=0,
        description="compute hours saved in the checkpoint this attempt resumes from")
    price_changes: list[PriceChange] = Field(
        default_factory=list,
        description="the held offer's price changes while it ran (from price history)")
    nodes: list[GangNode] = Field(
        default_factory=list, max_length=64,
        description="a gang's nodes by rank; empty for a one-node placement")

    @property
    def node_count(self) -> int:
        """Nodes of this placement: N for a gang, else 1."""
        return len(self.nodes) or 1

    def instance_ids(self) -> list[str]:
        """Every launched instance of this placement, by rank (empty before any launch)."""
        if self.nodes:
            return [n.instance_id for n in self.nodes if n.instance_id is not None]
        return [self.instance_id] if self.instance_id is not None else []

    def node_launched(self, node: GangNode, instance_id: str, launched_at: datetime) -> None:
        """Record that ``node`` (one of :attr:`nodes`) was launched as ``instance_id`` at
        ``launched_at``: the placement is billed from its first node's launch, whether or not
        the gang completes."""
        node.instance_id, node.launched_at = instance_id, launched_at
        if self.started_at is None or launched_at < self.started_at:
            self.started_at = launched_at

    def billed_nodes(self) -> int:
        """Instances this placement is billed for: the launched nodes (1 for one node)."""
        return max(1, len(self.instance_ids())) if self.nodes else 1

    def _window(self, now: datetime | None,
                since: datetime | None) -> tuple[datetime, datetime] | None:
        """The billed wall-clock window (start, end), cut to start no earlier than ``since``;
        ``None`` before the instance started or when the window is empty."""
        if self.started_at is None:
            return None
        end = self.ended_at or now or utcnow()
        start = self.started_at if since is None else max(self.started_at, since)
        return (start, end) if end > start else None

    def billed_hours(self, now: datetime | None = None, since: datetime | None = None) -> float:
        """Market hours this placement has been billed so far (0 before the instance
        started); with ``since``, only the hours billed from then on. Per node: a gang's
        instance-hours are this times :meth:`billed_nodes`."""
        window = self._window(now, since)
        if window is None:
            return 0.0
        return (window[1] - window[0]).total_seconds() * self.time_scale / 3600.0

    def instance_hours(self, now: datetime | None = None) -> float:
        """Market hours of every billed instance: :meth:`billed_hours` × :meth:`billed_nodes`."""
        return self.billed_hours(now) * self.billed_nodes()

    def cost_usd(self, now: datetime | None = None, since: datetime | None = None) -> float:
        """USD billed from the start to the end (or ``now``, default the wall clock): the
        integral of the held offer's price series over that window, in market hours, i.e.
        Σ price × (segment wall seconds × ``time_scale`` / 3600) over the piecewise-constant
        segments of ``price_changes``. A change before the start sets the price at the start;
        changes at or after the end are not billed. 0 before the instance started. With
        ``since`` (wall clock), only what was billed from then on (the window starts there).

        A gang's cost is that times its launched nodes (:meth:`billed_nodes`).

        This is the one computation of a placement's cost: status, cost reports, budgets and
        the money-saved metric all call it."""
        window = self._window(now, since)
        if window is None:
            return 0.0
        start, end = window
        price = self.offer.price_usd_per_hour
        usd_seconds = 0.0  # USD/hour × wall seconds
        mark = start
        for change in self.price_changes:
            if change.at >= end:
                break
            if change.at > mark:
                usd_seconds += price * (change.at - mark).total_seconds()
                mark = change.at
            price = change.price_usd_per_hour
        usd_seconds += price * (end - mark).total_seconds()
        return usd_seconds * self.time_scale / 3600.0 * self.billed_nodes()

    def price_usd_per_hour(self) -> float:
        """The held offer's latest recorded price (USD/hour)."""
        if self.price_changes:
            return self.price_changes[-1].price_usd_per_hour
        return self.offer.price_usd_per_hour

    def priced_until(self) -> datetime:
        """Time of the latest recorded price: its change, else the offer's observation."""
        if self.price_changes:
            return self.price_changes[-1].at
        return self.offer.observed_at

    def add_price_change(self, at: datetime, price_usd_per_hour: float) -> bool:
        """Record that the held price is ``price_usd_per_hour`` from ``at`` on; ``False`` (and
        nothing recorded) when it is the latest price already or ``at`` is before the latest
        change (changes arrive in order). A change before the start is recorded at the start
        (it is the price the start was billed at). Past :data:`MAX_PRICE_CHANGES`, the two
        oldest segments become one at their time-weighted mean price: the integral over any
        window that starts at the start and ends after the third-oldest change is unchanged.
        """
        if price_usd_per_hour == self.price_usd_per_hour():
            return False
        if self.started_at is not None and at < self.started_at:
            at = self.started_at
        if self.price_changes and at < self.price_changes[-1].at:
            return False
        if self.price_changes and at == self.price_changes[-1].at:
            self.price_changes.pop()  # superseded at the same instant
            if price_usd_per_hour == self.price_usd_per_hour():
                return True
        self.price_changes.append(PriceChange(at=at, price_usd_per_hour=price_usd_per_hour))
        if len(self.price_changes) > MAX_PRICE_CHANGES:
            self._merge_oldest()
        return True

    def _merge_oldest(self) -> None:
        first, second, third = self.price_changes[:3]
        span_s = (third.at - first.at).total_seconds()
        mean = ((first.price_usd_per_hour * (second.at - first.at).total_seconds()
                 + second.price_usd_per_hour * (third.at - second.at).total_seconds()) / span_s
                if span_s > 0 else second.price_usd_per_hour)
        self.price_changes[:2] = [PriceChange(at=first.at, price_usd_per_hour=mean)]

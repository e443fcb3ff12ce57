"""What the controller remembers between reconcile passes, in this process only.

Each field is a memory one step owns; a :class:`~scheduler.controller.context.Context` holds
one :class:`ControllerState` and the per-pass and per-job copies of it share that object. None
of it is kept in Redis: losing it (a restart, another replica taking a job) only delays work by
at most one interval (a review, a price catch-up, a ledger write) or re-reads the market once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from scheduler.controller.throttle import Spread, Throttle

if TYPE_CHECKING:
    from scheduler.controller.context import Observed
    from scheduler.controller.policy_inputs import MarketSnapshot
    from scheduler.controller.waste import Tracker

# Bound of :attr:`ControllerState.unmatched`: past it the memory starts afresh.
UNMATCHED_MAX = 100_000


@dataclass
class ControllerState:
    """In-process memories of the reconcile steps. Used from the reconcile thread only.

    - **reviews**: price-move reviews per (job id, placement decided-at) (the migrating
      step: one review per placement per poll interval, at most every MOVE_REVIEW_MIN_S).
    - **ledger_writes**: owner-ledger writes per job id, for owners without a limit (the
      budget step: once per LEDGER_REFRESH_S instead of every pass).
    - **catch_ups** / **settles**: price-history reads per (job id, attempt), spread over
      their interval (the pricing step).
    - **unmatched**: (job id, attempt) → (price USD/h, wall time) of a latest-offers price
      that price history did not hold yet (the pricing step), bounded by UNMATCHED_MAX.
    - **market**: the last pass's market snapshot, with the observation it was read for and
      when (``time.monotonic()``); see :func:`~scheduler.controller.policy_inputs.snapshot`.
    - **waste**: job id → the current attempt's recent GPU samples and progress points (the
      waste step, :mod:`scheduler.controller.waste`; bounded there).
    """

    reviews: Throttle = field(default_factory=Throttle)
    ledger_writes: Throttle = field(default_factory=Throttle)
    catch_ups: Spread = field(default_factory=Spread)
    settles: Spread = field(default_factory=Spread)
    unmatched: dict[tuple[str, int], tuple[float, datetime]] = field(default_factory=dict)
    market: tuple[Observed, float, MarketSnapshot] | None = None
    waste: dict[str, Tracker] = field(default_factory=dict)

"""Which checkpoints of a job to keep: a pure rule over plain data.

Kept: the ``keep_last`` newest; every ``keep_every``-th by commit order (the 1st, the
(K+1)-th, the (2K+1)-th, ... counted by each checkpoint's ``sequence``, so the choice does not
shift as older ones are pruned); the one the job would restore from (the newest whose blobs
are all present); and every id in ``protect`` (the job record's ``last_checkpoint_id``, one
being restored).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """One committed checkpoint as retention sees it.

    - **checkpoint_id**: sorts in commit order.
    - **sequence**: 1-based commit ordinal in the job (``None``: not recorded).
    - **complete**: its manifest reads and every blob it names is in the store.
    """

    checkpoint_id: str
    sequence: int | None = None
    complete: bool = True


def retained_ids(candidates: Sequence[Candidate], keep_last: int, keep_every: int = 0,
                 protect: Collection[str] = ()) -> set[str]:
    """The ids of ``candidates`` to keep (the rest may be deleted).

    - **candidates**: the job's committed checkpoints, any order.
    - **keep_last**: how many of the newest to keep (≥ 1).
    - **keep_every**: also keep those whose sequence ``s`` has ``(s - 1) % keep_every == 0``;
      0 keeps none extra. A candidate without a sequence counts by its position in
      ``candidates`` sorted by id (1-based): checkpoints committed before sequences were
      recorded.
    - **protect**: ids always kept (ids not among the candidates are ignored).

    The newest ``complete`` candidate is kept even when newer, incomplete ones fill
    ``keep_last``: it is the one a restart would restore from.

    Raises ``ValueError`` if ``keep_last`` < 1 or ``keep_every`` < 0.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, got {keep_last}")
    if keep_every < 0:
        raise ValueError(f"keep_every must be 0 or more, got {keep_every}")
    ordered = sorted(candidates, key=lambda c: c.checkpoint_id)
    keep = {c.checkpoint_id for c in ordered[-keep_last:]}
    if keep_every:
        for position, c in enumerate(ordered, start=1):
            seq = c.sequence if c.sequence is not None else position
            if (seq - 1) % keep_every == 0:
                keep.add(c.checkpoint_id)
    complete = [c.checkpoint_id for c in ordered if c.complete]
    if complete:
        keep.add(complete[-1])
    known = {c.checkpoint_id for c in ordered}
    keep.update(i for i in protect if i in known)
    return keep

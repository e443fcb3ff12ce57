"""Row-wise picks over the candidate (job, offer) pairs only, instead of dense ``(n, m)`` grids.

A placement compares each job with the offers it may launch now: usually a small share of
the ``n × m`` grid (its constraints refuse most offers). :class:`Pairs` lists those pairs,
row-major (by job, then offer index), and every per-(job, offer) figure is computed on the
``P`` pairs alone with the same floating-point operations as the dense grid, so the picks are
the dense ones bit for bit: :meth:`Pairs.pick` is :func:`policies.decisions._pick` (argmin,
near-ties within ``1e-9`` relative broken by the offer rank, ``nan`` rows pick nothing),
:meth:`Pairs.deadline_pick` is :func:`policies.decisions._deadline_pick`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np

from policies.views import NO_OFFER, JobView

_NO_RANK = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Pairs:
    """``P`` (job, offer) pairs of an ``(n, m)`` grid, row-major: ``rows``, ``cols`` ``(P,)``;
    :attr:`flat`: their indices into the raveled grid; ``starts``: where each job's run of
    pairs begins, ``ids`` its job and ``lengths`` its length."""

    rows: np.ndarray
    cols: np.ndarray
    n: int
    m: int
    starts: np.ndarray
    ids: np.ndarray
    lengths: np.ndarray

    @classmethod
    def of(cls, mask: np.ndarray) -> Pairs:
        """The True cells of ``mask`` (bool ``(n, m)``)."""
        n, m = mask.shape
        flat = flatnonzero(mask)
        # each job's run from n binary searches, not passes over the P pairs
        bounds = np.searchsorted(flat, np.arange(n + 1) * m)
        counts = np.diff(bounds)
        ids = np.flatnonzero(counts)
        lengths = counts[ids]
        rows = np.repeat(ids, lengths)
        cols = rows * m
        np.subtract(flat, cols, out=cols)
        return cls(rows, cols, n, m, bounds[ids], ids, lengths)

    @cached_property
    def flat(self) -> np.ndarray:
        """``(P,)`` indices of the pairs into the raveled grid (made when first asked for:
        only per-(job, offer) arrays are read through them, and the pairs are many)."""
        flat = self.rows * self.m
        flat += self.cols
        return flat

    def row(self, values: np.ndarray) -> np.ndarray:
        """``(P,)`` per-job values ``(n,)`` at the pairs (``values[rows]``, by runs: faster)."""
        return np.repeat(values[self.ids], self.lengths)

    def at(self, values: np.ndarray) -> np.ndarray:
        """``(P,)`` values of a per-offer ``(m,)`` or per-(job, offer) ``(n, m)``/``(n, 1)``/
        ``(1, m)`` array at the pairs."""
        values = np.asarray(values)
        if values.ndim == 1:
            return values[self.cols]
        if values.shape == (self.n, self.m) and values.flags.c_contiguous:
            return values.reshape(-1)[self.flat]
        if values.shape[1] > 1:
            return values[0][self.cols] if values.shape[0] == 1 else values[self.rows, self.cols]
        if values.shape[0] > 1:
            return self.row(values[:, 0])
        return np.full(len(self.rows), values[0, 0])

    def jobs(self, jobs: JobView, names: tuple[str, ...]) -> JobView:
        """A view of ``P`` jobs, pair ``k`` being job ``rows[k]``, with the fields ``names``
        (the others empty): per-job rules evaluated at every pair."""
        empty = np.zeros(0)
        return JobView(**{f.name: self.row(getattr(jobs, f.name)) if f.name in names else empty
                          for f in fields(JobView)})

    def any(self, sel: np.ndarray | None) -> np.ndarray:
        """``(n,)`` bool: the job has a selected pair (``sel``, bool ``(P,)``; ``None``: any)."""
        out = np.zeros(self.n, bool)
        if sel is None:
            out[self.ids] = True
        elif len(sel):
            out[self.ids] = np.logical_or.reduceat(sel, self.starts)
        return out

    def _runs(self, sel: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray, np.ndarray,
                                                     np.ndarray]:
        """``(at, ids, lengths, starts)`` of the pairs ``sel`` selects (bool ``(P,)``; ``None``:
        all, ``at`` then ``None``): their indices and, per job that has some, its id, how many
        and where its run begins among them."""
        if sel is None:
            return None, self.ids, self.lengths, self.starts
        if not len(sel):
            none = np.zeros(0, np.intp)
            return none, none, none, none
        per_run = np.add.reduceat(sel, self.starts, dtype=np.intp)
        some = np.flatnonzero(per_run)
        lengths = per_run[some]
        return flatnonzero(sel), self.ids[some], lengths, np.cumsum(lengths) - lengths

    def _min(self, rows: np.ndarray, values: np.ndarray, fill) -> np.ndarray:
        """``(n,)`` minimum of ``values`` per job over pairs of ``rows`` (sorted), ``fill`` for
        a job without any; ``nan`` propagates."""
        out = np.full(self.n, fill, dtype=values.dtype)
        if len(rows):
            starts = _starts(rows)
            out[rows[starts]] = np.minimum.reduceat(values, starts)
        return out

    def pick(self, values: np.ndarray, sel: np.ndarray | None,
             rank: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Per job, the selected pair (``sel``: bool ``(P,)``, ``None``: every pair) of least
        ``values`` (``(P,)``), near-ties (within ``1e-9`` relative of the best) broken by the
        least rank (``rank()``: ``(m,)``, a permutation; only called when some job has a
        near-tie). Returns ``(offer index, value)`` ``(n,)``: :data:`NO_OFFER` and the best
        where that is not finite (``inf`` without any selected pair, ``nan`` when one is
        ``nan``)."""
        at, ids, lengths, starts = self._runs(sel)
        v, cols = (values, self.cols) if at is None else (values[at], self.cols[at])
        best = np.full(self.n, np.inf, dtype=v.dtype)
        if len(v):
            best[ids] = np.minimum.reduceat(v, starts)
        ok = np.isfinite(best)
        tol = 1e-9 * np.maximum(np.abs(np.where(ok, best, 0.0)), 1.0)
        near = np.flatnonzero(v <= np.repeat((best + tol)[ids], lengths))
        near_rows = ids[np.searchsorted(starts, near, side="right") - 1]
        taken = ok[near_rows]
        idx = np.full(self.n, NO_OFFER)
        if not (np.bincount(near_rows[taken], minlength=self.n) > 1).any():
            # no near-tie: each job's only near pair is its argmin
            idx[near_rows[taken]] = cols[near][taken]
            return idx, best
        order_rank = rank()
        first = self._min(near_rows, order_rank[cols[near]].astype(np.int64), _NO_RANK)
        order = np.empty(self.m, np.intp)
        order[order_rank] = np.arange(self.m)
        return np.where(ok, order[np.minimum(first, self.m - 1)], NO_OFFER), best

    def deadline_pick(self, remaining: np.ndarray, finish: np.ndarray, speed: np.ndarray,
                      in_time: np.ndarray, sel: np.ndarray | None,
                      rank: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Per job, the selected pair cheapest to finish (``finish``) among those in time
        (``in_time``); where none is, the cheapest of those that finish first with a new launch
        (least ``remaining / speed``; ``remaining`` ``(n,)``, the others ``(P,)``; ``sel``
        ``None``: every pair)."""
        idx, cost = self.pick(finish, in_time if sel is None else sel & in_time, rank)
        late = (idx == NO_OFFER) & self.any(sel)
        if late.any():
            # the late jobs' selected pairs only
            sub = self.row(late) if sel is None else sel & self.row(late)
            at, ids, lengths, starts = self._runs(sub)
            s = speed[at]
            with np.errstate(divide="ignore", invalid="ignore"):
                hours = np.repeat(remaining[ids], lengths) / np.where(s > 0, s, np.nan)
            h = np.where(np.isfinite(hours), hours, np.inf)
            first = np.full(self.n, np.inf)
            if len(h):
                first[ids] = np.minimum.reduceat(h, starts)
            bound = first + 1e-9 * np.maximum(np.abs(first), 1.0)
            near = np.zeros(len(sub), bool)
            near[at] = h <= np.repeat(bound[ids], lengths)
            i2, c2 = self.pick(finish, near, rank)
            idx[late], cost[late] = i2[late], c2[late]
        return idx, cost


# Cells of the mask searched at a time (a multiple of 8): the temporaries of one chunk stay in
# the core's cache and are reused from chunk to chunk.
_CHUNK = 1 << 18


def flatnonzero(mask: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(mask)`` of a bool array, faster on large C-contiguous ones.

    At 10 % density or less (typical of candidate pairs) numpy searches from each True cell
    to the next, a call per cell that costs more than reading every byte (what it does above
    10 %). Here, chunk by chunk, it reads which 8-byte words hold a True cell, then the bytes
    of those words only (at least 1 in 8 True): both read byte by byte, in one pass each.
    Denser masks are left to numpy."""
    if mask.size < _CHUNK or not mask.flags.c_contiguous or mask.dtype != np.bool_:
        return np.flatnonzero(mask)
    cells = mask.reshape(-1)
    count = np.count_nonzero(cells)
    if count > 0.1 * cells.size:
        return np.flatnonzero(cells)
    whole = cells.size - cells.size % 8
    words = cells[:whole].view(np.uint64)
    out = np.empty(count, np.intp)
    k = 0
    for s in range(0, whole, _CHUNK):
        chunk = words[s >> 3:(s + _CHUNK) >> 3]
        hit = np.flatnonzero(chunk != 0)
        pos = np.flatnonzero(chunk[hit].view(np.bool_))
        found = hit[pos >> 3]
        found <<= 3
        found += pos & 7
        found += s
        out[k:k + len(found)] = found
        k += len(found)
    out[k:] = np.flatnonzero(cells[whole:]) + whole
    return out


def _starts(rows: np.ndarray) -> np.ndarray:
    """Where each run of equal values of ``rows`` (sorted) begins."""
    if not len(rows):
        return np.zeros(0, np.intp)
    return np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))

"""Leak collection: terminate instances we own that no active job claims.

Instances are listed from the providers *before* jobs are read, and only instances older than
``ORPHAN_GRACE_S`` are touched, so an instance launched a moment before its job record was
saved is never taken for a leak (Karpenter's garbage collection does the same).
"""

from __future__ import annotations

import logging

from providers.errors import ProviderError
from scheduler.controller.context import Context
from scheduler.timing import ORPHAN_GRACE_S

log = logging.getLogger(__name__)


def sweep_orphans(ctx: Context) -> list[str]:
    """Terminate unclaimed instances; return their ids."""
    observed = ctx.observe()
    claimed: set[str] = set()
    for job_id in ctx.store.jobs.active_ids():
        job = ctx.store.jobs.get(job_id)
        if job is not None and job.placement is not None:
            claimed.add(job.placement.client_token)
            claimed.update(n.client_token for n in job.placement.nodes)  # a gang's nodes
    now = ctx.clock()
    terminated = []
    for inst in observed.by_id.values():
        if inst.state.is_gone() or inst.client_token in claimed:
            continue
        if (now - inst.launched_at).total_seconds() < ORPHAN_GRACE_S:
            continue
        try:
            ctx.providers.compute(inst.offer.provider).terminate(inst.id)
            terminated.append(inst.id)
            log.warning("terminated orphan instance %s (job %s)", inst.id, inst.job_id)
        except (ProviderError, KeyError) as exc:
            log.warning("could not terminate orphan %s: %s", inst.id, exc)
    return terminated

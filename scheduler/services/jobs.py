"""Submitting, reading and cancelling jobs, as the caller may.

Submission validates everything before it writes anything: the spec (strict schema), the
deadline, the owner, the owner's budget and the code bundle. The bundle is uploaded first and
the job record written last, so a refused or failed submission leaves nothing behind.

Who may do what (``principal``, a :class:`~scheduler.store.users.Principal`): a job's owner
is the user who submitted it (``spec.owner``, set by :func:`owner_for`); a user reads, follows
and cancels only their own jobs, an admin every job. Another user's job is answered as an
unknown one (:class:`JobNotFound`), so ids of other users' jobs are not disclosed. Callers
inside the daemon (controller, planner, tests of the policy) pass no principal: the spec's
``owner`` is taken as written and every job is visible.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import tarfile
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from core.models import (
    Job,
    JobEvent,
    JobSpec,
    JobState,
    Placement,
    describe_validation_error,
    utcnow,
)
from core.models.agents import AgentReport
from core.models.limits import BUNDLE_MAX_BYTES as MAX_BUNDLE_BYTES
from policies.constraints import unknown_names
from policies.throughput import unknown_gpu_warnings
from scheduler.budgets import check_owner_budget
from scheduler.checkpoints.bundles import check_bundle
from scheduler.checkpoints.keys import code_bundle_key
from scheduler.checkpoints.objectstore import ObjectStore, UnsafeBundle
from scheduler.services.work import work_cost
from scheduler.store import StaleJobError, Store
from scheduler.store.job_stats import MIGRATION_REASONS
from scheduler.store.known_names import KnownNames
from scheduler.store.users import Principal

# Timeline event kind of a warning given at submit.
SPEC_WARNING = "spec-warning"


class SpecError(ValueError):
    """The submission was refused. ``problems``: ``[{"field", "value", "problem"}]``."""

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p['field']}: {p['problem']}" for p in problems))


class JobNotFound(KeyError):
    pass


def parse_spec(raw: Any) -> JobSpec:
    """Validate a job spec given as a mapping. Raises :class:`SpecError`."""
    if not isinstance(raw, dict):
        raise SpecError([{"field": "(spec)", "value": type(raw).__name__,
                          "problem": "a job spec must be a mapping of fields"}])
    _check_text(raw, "")
    try:
        spec = JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc, JobSpec)) from None
    if spec.deadline is not None and spec.deadline <= utcnow():
        raise SpecError([{"field": "deadline", "value": spec.deadline.isoformat(),
                          "problem": "must be in the future"}])
    return spec


def _check_text(value: Any, field: str) -> None:
    """JSON may carry lone UTF-16 surrogates (``"\\ud800"``), which no UTF-8 store can hold:
    refuse them up front, naming the field, instead of failing when the job is written."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, field or "(spec)")
            _check_text(item, f"{field}.{key}" if field else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_text(item, f"{field}[{index}]")
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise SpecError([{"field": field, "value": value.encode("utf-8", "replace").decode(),
                              "problem": "must be valid Unicode text (a lone surrogate "
                                         "escape such as \\ud800 is not)"}]) from None


def _decode_bundle(bundle_b64: str) -> bytes:
    try:
        data = base64.b64decode(bundle_b64, validate=True)
    except (binascii.Error, ValueError):
        raise SpecError([{"field": "bundle_b64", "value": bundle_b64[:20] + "...",
                          "problem": "not valid base64"}]) from None
    if len(data) > MAX_BUNDLE_BYTES:
        raise SpecError([{"field": "bundle_b64", "value": f"{len(data)} bytes",
                          "problem": f"larger than {MAX_BUNDLE_BYTES} bytes"}])
    try:
        check_bundle(data)
    except UnsafeBundle as exc:
        raise SpecError([{"field": "bundle_b64", "value": "(archive)",
                          "problem": str(exc)}]) from None
    except tarfile.TarError as exc:
        raise SpecError([{"field": "bundle_b64", "value": "(archive)",
                          "problem": f"not a gzip tar archive: {exc}"}]) from None
    return data


def spec_warnings(store: Store, spec: JobSpec) -> list[str]:
    """The spec's provider, region, zone and GPU model names that no configured provider has
    ever listed, each with the closest listed names (:func:`policies.constraints.unknown_names`
    over :class:`~scheduler.store.known_names.KnownNames`), then its ``reference_gpu`` and
    ``work.throughput`` GPU models the GPU table lacks, with the closest table names
    (:func:`policies.throughput.unknown_gpu_warnings`). Raises ``redis.RedisError``."""
    listed = [f"{w}; submitted anyway (a provider may list it later)"
              for w in unknown_names(spec, KnownNames(store.redis).names())]
    return listed + [f"{w}; submitted anyway" for w in unknown_gpu_warnings(spec)]


def warnings_of(job: Job) -> list[str]:
    """The warnings recorded at submit (timeline events of kind :data:`SPEC_WARNING`)."""
    return [e.message for e in job.events if e.kind == SPEC_WARNING]


def owner_for(store: Store, principal: Principal, raw_spec: dict[str, Any]) -> str:
    """Whose job a submission of ``principal`` is: the caller's own name, unless an admin
    names another existing user in the spec's ``owner``.

    Raises :class:`SpecError` naming ``owner``: a user's spec names someone else ("only an
    admin may submit on behalf of another user"); an admin's names no existing user.
    Raises ``redis.RedisError``."""
    named = raw_spec.get("owner")
    if named is None or named == principal.user:
        return principal.user
    if not principal.is_admin:
        raise SpecError([{"field": "owner", "value": named,
                          "problem": "only an admin may submit on behalf of another user "
                                     "(leave owner out, or give your own name "
                                     f"{principal.user!r})"}])
    if store.users.get(named) is None:
        raise SpecError([{"field": "owner", "value": named,
                          "problem": f"no user {named!r} (an admin adds one with "
                                     "`schedctl users add`)"}])
    return named


def submit(store: Store, objects: ObjectStore, raw_spec: Any, bundle_b64: str | None = None,
           principal: Principal | None = None) -> Job:
    """Validate and store a new job; returns it in state ``pending``.

    ``principal``: who submits; the job's ``spec.owner`` becomes theirs (:func:`owner_for`)
    and the budget checked is that owner's. ``None`` (callers inside the daemon): the spec's
    ``owner`` as written.

    A name in the spec that no provider ever listed (a misspelled region or GPU model) does not
    refuse the job (a provider may list it later): it is recorded as a timeline event of kind
    :data:`SPEC_WARNING` (:func:`warnings_of`; ``warnings`` of :func:`summary`).

    Raises:
        SpecError: the spec, its owner or the bundle is invalid (nothing was stored).
        scheduler.budgets.BudgetExhausted: the owner's budget is already spent (nothing was
            stored).
    """
    spec = parse_spec(raw_spec)
    if principal is not None:
        # A name of the same shape as the spec's (USER_NAME_RE), so no re-validation.
        spec = spec.model_copy(update={"owner": owner_for(store, principal, raw_spec)})
    if spec.workdir and not bundle_b64:
        # Without it the job would run in an empty folder: the workdir is the submitter's.
        raise SpecError([{"field": "bundle_b64", "value": bundle_b64,
                          "problem": f"missing: workdir {spec.workdir!r} is shipped as a gzip "
                                     "tar in bundle_b64 (schedctl submit packs it)"}])
    check_owner_budget(store, spec.owner)
    bundle = _decode_bundle(bundle_b64) if bundle_b64 else None
    now = utcnow()
    job = Job(id=f"{spec.name}-{secrets.token_hex(3)}", spec=spec, created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted", at=now)
    for warning in spec_warnings(store, spec):
        job.record(JobState.PENDING, f"warning: {warning}", at=now, kind=SPEC_WARNING)
    if bundle is not None:
        objects.put_bytes(code_bundle_key(job.id), bundle)
    try:
        return store.jobs.create(job)
    except Exception:
        if bundle is not None:
            objects.delete([code_bundle_key(job.id)])
        raise


def get(store: Store, job_id: str, principal: Principal | None = None) -> Job:
    """The job ``job_id`` if ``principal`` may see it (``None``: anyone). Raises
    :class:`JobNotFound` for an unknown job and alike for another user's."""
    job = store.jobs.get(job_id)
    if job is None or (principal is not None and not principal.may_see(job.spec.owner)):
        raise JobNotFound(job_id)
    return job


def visible(store: Store, job_id: str, principal: Principal | None) -> bool:
    """Whether ``job_id`` exists and ``principal`` may see it (one Redis read)."""
    try:
        get(store, job_id, principal)
    except JobNotFound:
        return False
    return True


def list_jobs(store: Store, principal: Principal | None, limit: int = 100,
              owner: str | None = None) -> list[Job]:
    """Jobs newest first, at most ``limit``: of ``owner`` when given; a user's own only
    (``owner`` naming another user then gives none). Raises ``redis.RedisError``."""
    if principal is not None and not principal.is_admin:
        if owner is not None and owner != principal.user:
            return []
        owner = principal.user
    return store.jobs.list(limit, owner=owner)


def cancel(store: Store, job_id: str, principal: Principal | None = None) -> Job:
    """Ask the controller to cancel; idempotent. A terminal job is returned unchanged.
    Raises :class:`JobNotFound` as :func:`get`."""
    for _ in range(20):
        job = get(store, job_id, principal)
        if job.state.is_terminal() or job.cancel_requested:
            return job
        job.cancel_requested = True
        job.events.append(JobEvent(at=utcnow(), state=job.state, message="cancel requested"))
        try:
            return store.jobs.save(job)
        except StaleJobError:
            continue  # the controller wrote meanwhile; re-read
    raise RuntimeError(f"job {job_id} kept changing; cancel again")


def summary(job: Job, gang_reports: Sequence[AgentReport | None] | None = None) -> dict[str, Any]:
    """Job plus derived money figures: ``cost_usd``, ``on_demand_cost_usd``, ``savings_pct``,
    ``billed_hours`` (market hours; per node), ``instance_hours`` (market hours of every
    node), ``migrations`` (see :func:`migrations`),
    ``placement_costs``, ``work`` (the job's units done and left and what 1,000 of them cost:
    :meth:`scheduler.services.work.WorkCost.as_dict`, or ``None`` for a job with neither a
    spec ``work`` nor a progress report), ``gang`` (:func:`gang_nodes`: a gang's nodes, else
    ``None``; ``gang_reports``: its agents' latest reports by rank, as :func:`view` reads
    them; without them each node's state is only its launch's). Costs are the held offers'
    recorded price series integrated (:meth:`~core.models.Placement.cost_usd`)."""
    now = utcnow()
    cost = job.cost_usd(now)
    on_demand = job.on_demand_cost_usd(now)
    savings = None
    if on_demand:
        savings = round(100.0 * (1 - cost / on_demand), 2)
    data = job.model_dump(mode="json")
    data["warnings"] = warnings_of(job)
    data["derived"] = {
        "cost_usd": round(cost, 6),
        "on_demand_cost_usd": None if on_demand is None else round(on_demand, 6),
        "savings_pct": savings,
        "billed_hours": round(job.billed_hours(now), 6),
        # what the instances ran in all: a gang's hours count each launched node
        "instance_hours": round(sum(p.instance_hours(now) for p in job.all_placements()), 6),
        # per placement, in job["placements"] + [job["placement"]] order: what it was billed
        # (its held offer's price series integrated, every node of a gang), its latest
        # recorded price (per node) and its nodes
        "placement_costs": [{"cost_usd": round(p.cost_usd(now), 6), "billed_hours":
                             round(p.billed_hours(now), 6),
                             "price_usd_per_hour": p.price_usd_per_hour(),
                             "node_count": p.node_count}
                            for p in job.all_placements()],
        "migrations": migrations(job),
        "work": _work(job, now),
        "gang": gang_nodes(job, gang_reports, now),
    }
    return data


def gang_placement(job: Job) -> Placement | None:
    """The gang placement the job view shows: the current placement, else (a job between
    placements or finished) the latest one, when it is a gang's; ``None`` otherwise."""
    latest = job.placement or (job.placements[-1] if job.placements else None)
    return latest if latest is not None and latest.nodes else None


def gang_nodes(job: Job, reports: Sequence[AgentReport | None] | None,
               now: datetime) -> dict[str, Any] | None:
    """The nodes of the job's gang placement (:func:`gang_placement`; ``None`` for a one-node
    job or before its first placement) as the job view shows them::

        {"attempt": 2, "node_count": 2, "cost_usd": 0.5, "ended": False,
         "nodes": [{"rank": 0, "instance_id": "i-1", "zone": "r1b", "address": "10.0.0.5",
                    "state": "running", "last_heartbeat": "2026-...Z", "cost_usd": 0.25}, ...]}

    ``state``: the rank's agent phase from its latest report (``reports[rank]``), else
    ``launching`` (no instance yet) or ``launched`` (the placement's end reason once ended);
    ``last_heartbeat``: when the daemon received that report (ISO 8601 UTC, ``None`` before
    any). ``cost_usd`` (USD, the placement's :meth:`~core.models.Placement.cost_usd` at
    ``now``) is the placement's total; a launched node's share is that over the launched
    nodes (they bill from one start), a node not launched has cost nothing."""
    placement = gang_placement(job)
    if placement is None:
        return None
    total = placement.cost_usd(now)
    share = total / placement.billed_nodes()
    by_rank = list(reports or [])
    nodes = []
    for node in placement.nodes:
        report = by_rank[node.rank] if node.rank < len(by_rank) else None
        if report is not None:
            state = report.phase.value
        elif node.instance_id is None:
            state = "launching"
        else:
            state = placement.end_reason.value if placement.end_reason else "launched"
        heartbeat = report.received_at if report is not None else None
        nodes.append({"rank": node.rank, "instance_id": node.instance_id,
                      "zone": placement.offer.zone,
                      "address": report.address if report is not None else None,
                      "state": state,
                      "last_heartbeat": heartbeat.isoformat() if heartbeat else None,
                      "cost_usd": round(share if node.instance_id else 0.0, 6)})
    return {"attempt": placement.attempt, "node_count": placement.node_count,
            "cost_usd": round(total, 6), "ended": placement.ended_at is not None,
            "nodes": nodes}


def view(store: Store, job: Job) -> dict[str, Any]:
    """:func:`summary` of ``job`` as the API answers it: a gang's nodes with their agents'
    latest reports (one Redis round trip, none for a one-node job). Raises
    ``redis.RedisError``."""
    return views(store, [job])[0]


def views(store: Store, jobs: Sequence[Job]) -> list[dict[str, Any]]:
    """:func:`view` of each of ``jobs`` (in order), every gang's reports read in one round
    trip. Raises ``redis.RedisError``."""
    gangs = {job.id: p for job in jobs if (p := gang_placement(job)) is not None}
    found = store.agents.last_reports([(job_id, p.attempt, node.rank)
                                       for job_id, p in gangs.items() for node in p.nodes])
    out = []
    for job in jobs:
        p = gangs.get(job.id)
        reports = None if p is None else [found.get((job.id, p.attempt, rank))
                                          for rank in range(p.node_count)]
        out.append(summary(job, reports))
    return out


def _work(job: Job, now: datetime) -> dict[str, Any] | None:
    cost = work_cost(job, now)
    return None if cost is None else cost.as_dict()


def migrations(job: Job) -> int:
    """Placements the job left and went on from: reclaimed (``preempted``), presumed
    ``lost``, or left for a cheaper offer (``moved``, a price-driven move), counted as
    ``ga_migrations_total`` counts them (:data:`MIGRATION_REASONS`)."""
    placements = job.all_placements()
    return sum(1 for i, p in enumerate(job.placements)
               if p.end_reason in MIGRATION_REASONS
               and (not job.state.is_terminal() or i + 1 < len(placements)))

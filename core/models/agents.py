"""What a node agent reports to the daemon, and what the daemon answers.

The agent POSTs an :class:`AgentReport` to ``/v1/agent/{instance_id}/report`` (bearer: the
agent token issued at launch) on every phase change and every heartbeat; the daemon answers with
an :class:`AgentCommand`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import Enum

from typing import Annotated

from pydantic import Field, StringConstraints, ValidationInfo, field_validator

from core.models.base import Count, StrictModel, ensure_utc
from core.models.instances import PreemptionNotice
from core.models.work import GpuSample, ProgressPoint


class AgentPhase(str, Enum):
    """Where the agent is.

    ``starting`` → ``restoring`` → ``running`` → one of: ``succeeded`` (command exited 0, final
    checkpoint committed), ``failed`` (exited non-zero, checkpoint committed), or, after a
    preemption notice or a stop command, ``checkpointing`` → ``checkpointed`` (signal sent,
    grace waited, checkpoint committed; the agent then exits).
    """

    STARTING = "starting"
    RESTORING = "restoring"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    CHECKPOINTED = "checkpointed"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    def is_final(self) -> bool:
        return self in (AgentPhase.CHECKPOINTED, AgentPhase.SUCCEEDED, AgentPhase.FAILED)


CHECKPOINT_ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"
# A host name or an IPv4/IPv6 address: what MASTER_ADDR may hold (it goes into environment
# variables and a peer's connect call, never a shell).
# No leading "-": an address must never read as a command-line option to whatever gets it.
ADDRESS_PATTERN = r"^[A-Za-z0-9.:_][A-Za-z0-9.:_-]*$"
Address = Annotated[str, StringConstraints(min_length=1, max_length=255,
                                           pattern=ADDRESS_PATTERN)]

POINT_AHEAD_S = 60.0
"""How far a progress point's ``at`` may be ahead of its report's ``at`` (the agent reads the
job's points at most this far ahead of its own clock, and reports later)."""


class AgentReport(StrictModel):
    """One report from a node agent.

    - **checkpoint_id**: the newest checkpoint this agent committed (``None`` if none yet).
    - **restored_from**: the checkpoint restored before the command started, if any.
      Checkpoint ids are at most 128 letters, digits, ``.``, ``_`` or ``-``: they name
      objects in the store and go into the job's timeline.
    - **notice**: the preemption notice read from instance metadata, once seen.
    - **log_lines**: new output lines of the command since the previous report (at most 500).
    - **log_seq**: the number of ``log_lines[0]`` in the attempt's output (its first line is
      0), so that lines a resent report carries again are stored once and lines the agent
      had to drop are noted; ``None`` from agents that do not number their lines.
    - **progress**: the latest progress point the job wrote to ``SCHED_PROGRESS_FILE``
      (``None`` when it reports none); **first_progress**: the first one of this attempt
      (with ``progress``, the daemon measures the attempt's throughput). Both count the
      same unit; ``first_progress`` is not after ``progress``, and ``progress`` is at most
      :data:`POINT_AHEAD_S` ahead of ``at``.
    - **gpu**: GPU utilisation and memory since the previous report (NVML; ``None`` where
      there is no GPU).
    - **rank**: which node of a gang this agent runs (0 for a one-node job).
    - **address**: a gang node's address its peers reach it at (IPv4/IPv6 or a host name, at
      most 255 characters), reported from the first report on; **master_port**: the TCP
      port rank 0's agent chose for the job's rendezvous (``MASTER_PORT``), rank 0 only.
    """

    job_id: str = Field(max_length=200)
    attempt: int = Field(ge=1)
    phase: AgentPhase
    at: datetime
    exit_code: int | None = None
    checkpoint_id: str | None = Field(default=None, pattern=CHECKPOINT_ID_PATTERN)
    restored_from: str | None = Field(default=None, pattern=CHECKPOINT_ID_PATTERN)
    notice: PreemptionNotice | None = None
    log_lines: list[str] = Field(default_factory=list, max_length=500)
    log_seq: int | None = Field(default=None, ge=0, le=2**53)
    message: str | None = Field(default=None, max_length=2000)
    progress: ProgressPoint | None = None
    first_progress: ProgressPoint | None = None
    gpu: GpuSample | None = None
    rank: Count = Field(default=0, ge=0, le=63)
    address: Address | None = None
    master_port: Count | None = Field(default=None, ge=1, le=65535)
    received_at: datetime | None = Field(
        default=None, description="set by the daemon on receipt; liveness uses this clock, "
                                  "never the agent's")

    _utc = field_validator("at", "received_at")(lambda v: None if v is None else ensure_utc(v))

    # Field validators (not one over the model) so that a refusal names its field.
    @field_validator("progress")
    @classmethod
    def _not_ahead_of_the_report(cls, v: ProgressPoint | None,
                                 info: ValidationInfo) -> ProgressPoint | None:
        at = info.data.get("at")
        if v is not None and at is not None and v.at > at + timedelta(seconds=POINT_AHEAD_S):
            raise ValueError(f"at: more than {POINT_AHEAD_S:g} s after the report's at "
                             "(a wrong clock)")
        return v

    @field_validator("first_progress")
    @classmethod
    def _agrees_with_progress(cls, v: ProgressPoint | None,
                              info: ValidationInfo) -> ProgressPoint | None:
        latest = info.data.get("progress")
        if v is not None and latest is not None:
            if v.unit is not latest.unit:
                raise ValueError("unit: not progress.unit")
            if v.at > latest.at:
                raise ValueError("at: after progress.at")
        return v


class AgentAction(str, Enum):
    CONTINUE = "continue"
    STOP = "stop"


class GangRoster(StrictModel):
    """Where a gang's nodes are: ``addresses[r]`` is rank r's address, ``master_port`` the
    port rank 0's agent chose. The daemon sends it to every node's agent once every rank has
    reported its address (:func:`roster_of`); the agents start the command only then."""

    nnodes: int = Field(ge=2, le=64)
    master_port: int = Field(ge=1, le=65535)
    addresses: list[Address] = Field(min_length=2, max_length=64)

    def environment(self, rank: int) -> dict[str, str]:
        """The job's rank environment on node ``rank`` (torchrun's names): ``NODE_RANK``,
        ``NNODES``, ``MASTER_ADDR`` (rank 0's address), ``MASTER_PORT``, and
        ``SCHED_NODES`` (every node's address by rank, comma-separated)."""
        return {"NODE_RANK": str(rank), "NNODES": str(self.nnodes),
                "MASTER_ADDR": self.addresses[0], "MASTER_PORT": str(self.master_port),
                "SCHED_NODES": ",".join(self.addresses)}


def roster_of(reports: Sequence[AgentReport | None], nnodes: int) -> GangRoster | None:
    """The roster of a gang of ``nnodes`` from its agents' latest reports by rank
    (``reports[r]``: rank r's, ``None`` when none yet); ``None`` until every rank reported an
    address and rank 0 its port."""
    if nnodes < 2 or len(reports) < nnodes:
        return None
    chosen = list(reports[:nnodes])
    if any(r is None or r.address is None for r in chosen):
        return None
    head = chosen[0]
    assert head is not None
    if head.master_port is None:
        return None
    return GangRoster(nnodes=nnodes, master_port=head.master_port,
                      addresses=[r.address for r in chosen if r is not None and r.address])


class AgentCommand(StrictModel):
    """The daemon's answer: ``continue``, or ``stop`` (signal the job, checkpoint, exit) —
    sent when the job is cancelled or being migrated. A gang node's agent also gets the
    gang's ``gang`` roster once it is complete."""

    action: AgentAction = AgentAction.CONTINUE
    reason: str | None = None
    gang: GangRoster | None = None

"""Agent tokens, reports and the output lines they carry.

An agent token is scoped to one attempt of one job, and on a gang to one node of it:
``{job_id}.{attempt}.{mac}`` (rank 0, every one-node job) or
``{job_id}.{attempt}-{rank}.{mac}`` where ``mac`` is an HMAC of the scope under the daemon's
secret, so one node's token cannot report for another node (rank 0 least of all, whose final
report ends the attempt). It is the same however often a launch is retried, the API can check
it before reading a request body, and Redis never holds it (or the secret).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable

import redis

from core.models import parse_lenient
from core.models.agents import AgentReport
from scheduler.store import keys, multi, scripts
from scheduler.store.connection import RedisClient
from scheduler.store.jobs import JobStore, cap_log_line
from scheduler.timing import JOB_LOG_MAX_LINES

# Reports of an attempt outlive it long enough for late final reports to land.
_AGENT_KEY_TTL_S = 7 * 24 * 3600


# "{attempt}" or "{attempt}-{rank}" with rank 1-63 (rank 0's token has one spelling only).
_SCOPE = re.compile(r"[0-9]{1,12}(-[1-9][0-9]?)?")


class AgentTokens:
    """Issue and check agent tokens. ``secret``: bytes kept outside Redis (see
    :func:`scheduler.daemon.secrets.load_secret`)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, job_id: str, attempt: int, rank: int) -> str:
        scope = f"agent:{job_id}:{attempt}" + (f":{rank}" if rank else "")
        return hmac.new(self._secret, scope.encode(), hashlib.sha256).hexdigest()

    def issue(self, job_id: str, attempt: int, rank: int = 0) -> str:
        """The token of the agent of ``attempt`` of ``job_id`` on node ``rank``."""
        where = f"{attempt}-{rank}" if rank else str(attempt)
        return f"{job_id}.{where}.{self._mac(job_id, attempt, rank)}"

    def scope(self, token: str) -> tuple[str, int, int] | None:
        """``(job_id, attempt, rank)`` the token is valid for, or ``None`` if it is not
        valid."""
        parts = token.rsplit(".", 2)
        if len(parts) != 3 or not _SCOPE.fullmatch(parts[1]):
            return None
        attempt_text, _, rank_text = parts[1].partition("-")
        job_id, attempt, rank = parts[0], int(attempt_text), int(rank_text or 0)
        expected = self._mac(job_id, attempt, rank).encode()
        if not hmac.compare_digest(expected, parts[2].encode("utf-8", "replace")):
            return None
        return job_id, attempt, rank

    def verify(self, token: str, job_id: str, attempt: int, rank: int = 0) -> bool:
        return self.scope(token) == (job_id, attempt, rank)


# A report's address in :meth:`AgentStore.last_reports`: ``(job_id, attempt)`` (rank 0, every
# one-node job's agent) or ``(job_id, attempt, rank)``.
ReportKey = tuple[str, int] | tuple[str, int, int]


def rank_prefix(rank: int) -> str:
    """What a gang's output line of node ``rank`` starts with in the job's log: nothing for
    rank 0 (and every one-node job), ``"[rank 1] "`` for rank 1."""
    return "" if rank == 0 else f"[rank {rank}] "


class AgentStore:
    """Newest report per job attempt and rank (a gang's nodes report apart)."""

    def __init__(self, client: RedisClient) -> None:
        self._r = client
        self._jobs = JobStore(client)
        self._append = client.register_script(scripts.APPEND_AGENT_LINES)

    def save_report(self, report: AgentReport) -> None:
        """Keep the newest report of its attempt and rank (log lines go to the job's log, not
        here).

        A report older than the stored one is ignored, so a delayed heartbeat cannot hide a
        final report that arrived before it.
        """
        key = keys.agent_report(report.job_id, report.attempt, report.rank)
        slim = report.model_copy(update={"log_lines": []})
        # A watch that a failover cuts raises WatchError on a cluster too (multi.transaction):
        # a retried SET on the promoted master could put a heartbeat over a final report.
        with multi.transaction(self._r) as pipe:
            try:
                pipe.watch(key)
                raw = pipe.get(key)
                if raw:
                    old = parse_lenient(AgentReport, raw)
                    if old.phase.is_final() and not report.phase.is_final():
                        return
                pipe.multi()
                pipe.set(key, slim.model_dump_json(), ex=_AGENT_KEY_TTL_S)
                pipe.execute()
            except redis.WatchError:
                return  # a concurrent report of the same agent won; the next one will land

    def append_output(self, report: AgentReport) -> int:
        """Append the report's ``log_lines`` to its job's log (a gang's rank r > 0 lines each
        prefixed :func:`rank_prefix`, then each capped by
        :func:`~scheduler.store.jobs.cap_log_line`; the log keeps the newest
        ``JOB_LOG_MAX_LINES``). With ``log_seq``, lines the log already has from this attempt's
        agent of this rank are skipped, and lines missing before them (the agent dropped them)
        are noted in one line saying how many. Returns how many lines were appended."""
        prefix = rank_prefix(report.rank)
        lines = [cap_log_line(prefix + line) for line in report.log_lines]
        if not lines:
            return 0
        job_id = report.job_id
        if report.log_seq is None:  # an agent that does not number its lines
            self._jobs.append_logs(job_id, lines)
            return len(lines)
        of = f"attempt {report.attempt}" + (f" rank {report.rank}" if report.rank else "")
        return int(self._append(
            keys=[keys.job_logs(job_id), keys.job_log_seq(job_id, report.rank)],
            args=[report.log_seq, JOB_LOG_MAX_LINES, report.attempt,
                  "[gpu-arbiter] ", f" output line(s) of {of} were "
                  "dropped by its agent while the daemon was unreachable (its spool was "
                  "full); the instance's job.log has them", *lines]))

    def last_report(self, job_id: str, attempt: int, rank: int = 0) -> AgentReport | None:
        """The newest report of node ``rank``'s agent (0: a one-node job's) of ``attempt``."""
        raw = self._r.get(keys.agent_report(job_id, attempt, rank))
        return parse_lenient(AgentReport, raw) if raw else None

    def last_reports(self, wanted: Iterable[ReportKey]) -> dict[ReportKey, AgentReport | None]:
        """:meth:`last_report` of many agents in one round trip (MGET:
        :func:`scheduler.store.multi.mget`).

        Args:
            wanted: ``(job_id, attempt)`` pairs (rank 0: a one-node job's agent, a gang's
                rank 0) and/or ``(job_id, attempt, rank)`` triples, in any mix.

        Returns:
            Each given tuple, as given, mapped to its newest report (``None``: none yet).
        """
        wanted = list(dict.fromkeys(wanted))
        if not wanted:
            return {}
        raws = multi.mget(self._r, [keys.agent_report(*w) for w in wanted])
        return {w: parse_lenient(AgentReport, raw) if raw else None
                for w, raw in zip(wanted, raws, strict=True)}

    def gang_reports(self, job_id: str, attempt: int, nodes: int) -> list[AgentReport | None]:
        """The newest report of each rank 0..``nodes`` - 1 of ``attempt``, by rank, in one
        round trip (``None`` for a rank that has not reported)."""
        found = self.last_reports([(job_id, attempt, r) for r in range(nodes)])
        return [found[(job_id, attempt, r)] for r in range(nodes)]

    def drop_legacy_instance_records(self) -> int:
        """Delete the per-instance records older versions wrote (``keys.LEGACY_INSTANCE_*``:
        no expiry, never read; providers describe instances every pass). Returns how many
        keys were deleted; a no-op once done."""
        found = [keys.LEGACY_INSTANCES_INDEX, *self._r.scan_iter(
            match=keys.LEGACY_INSTANCE_PATTERN, count=1000)]
        # A cluster client splits UNLINK by slot itself.
        return int(self._r.unlink(*found))

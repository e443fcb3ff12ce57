"""Agent tokens, reports and the output lines they carry.

An agent token is scoped to one attempt of one job: ``{job_id}.{attempt}.{mac}`` where ``mac``
is an HMAC of the scope under the daemon's secret. It is the same however often a launch is
retried, the API can check it before reading a request body, and Redis never holds it (or the
secret).
"""

from __future__ import annotations

import hashlib
import hmac

import redis

from core.models import parse_lenient
from core.models.agents import AgentReport
from scheduler.store import keys, scripts
from scheduler.store.jobs import JobStore, cap_log_line
from scheduler.timing import JOB_LOG_MAX_LINES

# Reports of an attempt outlive it long enough for late final reports to land.
_AGENT_KEY_TTL_S = 7 * 24 * 3600


class AgentTokens:
    """Issue and check agent tokens. ``secret``: bytes kept outside Redis (see
    :func:`scheduler.daemon.secrets.load_secret`)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, job_id: str, attempt: int) -> str:
        return hmac.new(self._secret, f"agent:{job_id}:{attempt}".encode(),
                        hashlib.sha256).hexdigest()

    def issue(self, job_id: str, attempt: int) -> str:
        return f"{job_id}.{attempt}.{self._mac(job_id, attempt)}"

    def scope(self, token: str) -> tuple[str, int] | None:
        """``(job_id, attempt)`` the token is valid for, or ``None`` if it is not valid."""
        parts = token.rsplit(".", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        job_id, attempt = parts[0], int(parts[1])
        expected = self._mac(job_id, attempt).encode()
        if not hmac.compare_digest(expected, parts[2].encode("utf-8", "replace")):
            return None
        return job_id, attempt

    def verify(self, token: str, job_id: str, attempt: int) -> bool:
        return self.scope(token) == (job_id, attempt)


class AgentStore:
    """Newest report per job attempt."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client
        self._jobs = JobStore(client)
        self._append = client.register_script(scripts.APPEND_AGENT_LINES)

    def save_report(self, report: AgentReport) -> None:
        """Keep the newest report of its attempt (log lines go to the job's log, not here).

        A report older than the stored one is ignored, so a delayed heartbeat cannot hide a
        final report that arrived before it.
        """
        key = keys.agent_report(report.job_id, report.attempt)
        slim = report.model_copy(update={"log_lines": []})
        with self._r.pipeline() as pipe:
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
        """Append the report's ``log_lines`` to its job's log (each capped by
        :func:`~scheduler.store.jobs.cap_log_line`; the log keeps the newest
        ``JOB_LOG_MAX_LINES``). With ``log_seq``, lines the log already has from this attempt
        are skipped, and lines missing before them (the agent dropped them) are noted in one
        line saying how many. Returns how many lines were appended."""
        lines = [cap_log_line(line) for line in report.log_lines]
        if not lines:
            return 0
        job_id = report.job_id
        if report.log_seq is None:  # an agent that does not number its lines
            self._jobs.append_logs(job_id, lines)
            return len(lines)
        return int(self._append(
            keys=[keys.job_logs(job_id), keys.job_log_seq(job_id)],
            args=[report.log_seq, JOB_LOG_MAX_LINES, report.attempt,
                  "[gpu-arbiter] ", f" output line(s) of attempt {report.attempt} were "
                  "dropped by its agent while the daemon was unreachable (its spool was "
                  "full); the instance's job.log has them", *lines]))

    def last_report(self, job_id: str, attempt: int) -> AgentReport | None:
        raw = self._r.get(keys.agent_report(job_id, attempt))
        return parse_lenient(AgentReport, raw) if raw else None

    def last_reports(self, attempts: list[tuple[str, int]]) -> dict[tuple[str, int], AgentReport | None]:
        """:meth:`last_report` of each ``(job_id, attempt)`` in one round trip."""
        if not attempts:
            return {}
        raws = self._r.mget([keys.agent_report(j, a) for j, a in attempts])
        return {pair: parse_lenient(AgentReport, raw) if raw else None
                for pair, raw in zip(attempts, raws, strict=True)}

    def drop_legacy_instance_records(self) -> int:
        """Delete the per-instance records older versions wrote (``keys.LEGACY_INSTANCE_*``:
        no expiry, never read; providers describe instances every pass). Returns how many
        keys were deleted; a no-op once done."""
        found = [keys.LEGACY_INSTANCES_INDEX, *self._r.scan_iter(
            match=keys.LEGACY_INSTANCE_PATTERN, count=1000)]
        return int(self._r.unlink(*found))

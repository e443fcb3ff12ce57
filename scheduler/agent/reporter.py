"""Reports from the agent to the daemon, with the job's output lines.

``POST {GA_API_URL}/v1/agent/{instance_id}/report`` with ``Authorization: Bearer {token}`` and
an :class:`AgentReport` as JSON; the answer is an :class:`AgentCommand`. The daemon may be down
at any moment: an ordinary report that fails is dropped (its log lines stay queued for the next
one); a final report is retried for up to 10 minutes.

``GA_API_URL`` may list several daemon replicas, comma-separated: a report that cannot reach
one (connection failure, timeout, 5xx) is sent to the next at once, and the reporter stays with
the replica that answered. Replicas share one Redis and one agent secret, so any of them takes
any report.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

import httpx
from pydantic import ValidationError

from scheduler.agent.retries import retrying
from scheduler.models import utcnow
from scheduler.models.agents import AgentCommand, AgentPhase, AgentReport
from scheduler.timing import REPORT_CONNECT_TIMEOUT_S, REPORT_TIMEOUT_S

logger = logging.getLogger(__name__)

LINES_PER_REPORT = 500  # AgentReport.log_lines accepts at most 500
# Lines kept while the daemon is unreachable; older ones are dropped (the full output stays in
# WORK_DIR/job.log).
MAX_QUEUED_LINES = 20_000
MAX_LINE_CHARS = 4000


class ReportNotDelivered(Exception):
    """The daemon did not accept a report. ``transient`` says whether retrying may help."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, ReportNotDelivered) and exc.transient


class Reporter:
    """Sends reports for one job attempt and queues the job's output lines between them.

    - **api_url**: daemon base URL, or several comma-separated (replicas, tried in turn).
      **token**: bearer token (never logged).
    - **instance_id**, **job_id**, **attempt**: who is reporting.
    - **transport** (optional): an httpx transport, for tests.

    :meth:`add_line` may be called from any thread; the send methods from one thread only.
    """

    def __init__(self, api_url: str, token: str, instance_id: str, job_id: str, attempt: int,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.job_id, self.attempt = job_id, attempt
        self._path = f"/v1/agent/{instance_id}/report"
        self._urls = [u.strip().rstrip("/") for u in api_url.split(",") if u.strip()]
        if not self._urls:
            raise ValueError("api_url: no daemon URL given")
        self._current = 0  # index of the replica that answered last
        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(REPORT_TIMEOUT_S, connect=REPORT_CONNECT_TIMEOUT_S),
            transport=transport,
        )
        self._lines: deque[tuple[int, str]] = deque()
        self._next_seq = 0
        self._dropped = 0
        self._lock = threading.Lock()
        self._down_logged = False

    def close(self) -> None:
        self._http.close()

    def add_line(self, line: str) -> None:
        """Queue one output line (without its newline) for the next report."""
        with self._lock:
            self._lines.append((self._next_seq, line[:MAX_LINE_CHARS]))
            self._next_seq += 1
            if len(self._lines) > MAX_QUEUED_LINES:
                self._lines.popleft()
                self._dropped += 1

    def queued_lines(self) -> int:
        with self._lock:
            return len(self._lines)

    def _batch(self) -> tuple[list[str], int | None, str | None]:
        """Up to LINES_PER_REPORT queued lines, the last one's sequence number, and a note on
        lines dropped while the daemon was unreachable (reset once reported)."""
        with self._lock:
            batch = list(islice(self._lines, LINES_PER_REPORT))
            note = (f"{self._dropped} output line(s) dropped while the daemon was unreachable; "
                    "see job.log") if self._dropped else None
        return [line for _, line in batch], (batch[-1][0] if batch else None), note

    def _acknowledge(self, last_seq: int | None, had_note: bool) -> None:
        with self._lock:
            while last_seq is not None and self._lines and self._lines[0][0] <= last_seq:
                self._lines.popleft()
            if had_note:
                self._dropped = 0

    def _post(self, phase: AgentPhase, fields: dict[str, Any]) -> AgentCommand:
        """One POST; raises :class:`ReportNotDelivered`."""
        lines, last_seq, note = self._batch()
        message = fields.pop("message", None)
        if note:
            message = f"{message}; {note}" if message else note
        report = AgentReport(job_id=self.job_id, attempt=self.attempt, phase=phase, at=utcnow(),
                             log_lines=lines, message=message[:2000] if message else None,
                             **fields)
        answer = self._post_to_a_replica(report.model_dump(mode="json"))
        if not answer.is_success:
            code = answer.status_code
            raise ReportNotDelivered(f"daemon answered HTTP {code}: {answer.text[:200]}",
                                     code in (408, 429))
        self._acknowledge(last_seq, note is not None)
        try:
            return AgentCommand.model_validate_json(answer.content)
        except ValidationError:
            logger.warning("daemon's answer is not an AgentCommand; continuing")
            return AgentCommand()

    def _post_to_a_replica(self, body: dict[str, Any]) -> httpx.Response:
        """POST ``body`` to the current replica, failing over to the next ones in turn while a
        replica is unreachable or answers 5xx. Returns the first other answer; raises
        :class:`ReportNotDelivered` (transient) when no replica took it."""
        problems = []
        for _ in range(len(self._urls)):
            url = self._urls[self._current]
            try:
                answer = self._http.post(url + self._path, json=body)
            except httpx.HTTPError as exc:
                problems.append(f"{url} unreachable ({type(exc).__name__})")
            else:
                if answer.status_code < 500:
                    return answer
                problems.append(f"{url} answered HTTP {answer.status_code}: {answer.text[:200]}")
            if len(self._urls) > 1:
                self._current = (self._current + 1) % len(self._urls)
                logger.info("report failed at %s; trying %s", url, self._urls[self._current])
        raise ReportNotDelivered("daemon " + "; ".join(problems), True)

    def send(self, phase: AgentPhase, **fields: Any) -> AgentCommand | None:
        """Send one report now (heartbeat or phase change); ``fields`` are other
        :class:`AgentReport` fields (checkpoint_id, restored_from, notice, exit_code, message).

        Returns the daemon's command, or ``None`` when the report was not delivered (logged
        once per outage; never raises for the daemon being down).
        """
        try:
            command = self._post(phase, dict(fields))
        except ReportNotDelivered as exc:
            if not self._down_logged:
                logger.warning("report %s not delivered: %s (will keep trying)", phase.value, exc)
                self._down_logged = True
            return None
        if self._down_logged:
            logger.info("daemon reachable again")
            self._down_logged = False
        return command

    def send_final(self, phase: AgentPhase, interim_phase: AgentPhase,
                   on_wait: Callable[[], None] | None = None, **fields: Any) -> AgentCommand | None:
        """Deliver a final report (succeeded / failed / checkpointed), retrying transient
        failures with backoff (capped at 5 s) for up to 10 minutes.

        Queued output beyond one report's 500 lines is sent first in best-effort reports of
        ``interim_phase`` (the phase the daemon last saw), so the final one carries the last
        lines.

        - **on_wait** (optional): called between tries.

        Returns the daemon's command, or ``None`` if the report could not be delivered (the
        daemon stayed unreachable, or refused it: e.g. 403 for a revoked token).
        """
        interim = {k: v for k, v in fields.items() if k != "exit_code"}
        while self.queued_lines() > LINES_PER_REPORT:
            if self.send(interim_phase, **interim) is None:
                break
        try:
            for attempt in retrying(f"final report {phase.value}", _transient, on_wait):
                with attempt:
                    command = self._post(phase, dict(fields))
        except ReportNotDelivered as exc:
            logger.error("final report %s not delivered: %s", phase.value, exc)
            return None
        logger.info("final report %s delivered", phase.value)
        return command

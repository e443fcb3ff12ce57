"""Reports from the agent to the daemon, with the job's output lines.

``POST {GA_API_URL}/v1/agent/{instance_id}/report`` with ``Authorization: Bearer {token}`` and
an :class:`AgentReport` as JSON; the answer is an :class:`AgentCommand`. The daemon may be down
at any moment: an ordinary report that fails is dropped (its log lines stay queued for the next
one); a final report is retried for up to 10 minutes.

Output lines wait in a spool in memory until a report carrying them is answered: at most
``MAX_QUEUED_LINES`` lines and ``MAX_QUEUED_BYTES`` bytes (as sent, JSON-escaped), each line
cut to ``MAX_LINE_CHARS`` characters; one report carries at most ``LINES_PER_REPORT`` lines
and ``MAX_REPORT_LOG_BYTES`` of them. When a limit is hit the oldest lines are dropped (the newest
are kept; the instance's ``WORK_DIR/job.log`` keeps everything). Lines are numbered in the
order the job printed them and each report says the number of its first line
(``AgentReport.log_seq``), so the daemon stores each line once, in order, however often a
report is sent again, and notes in the job's log how many lines were dropped where. Once the
daemon answers again the spool is emptied report after report (:meth:`Reporter.send`), and
every final report is sent only after the whole spool (:meth:`Reporter.send_final`).

``GA_API_URL`` may list several daemon replicas, comma-separated: a report that cannot reach
one (connection failure, timeout, 5xx) is sent to the next at once, and the reporter stays with
the replica that answered. Replicas share one Redis and one agent secret, so any of them takes
any report.

A gang node's reporter puts the node's ``rank`` in every report, and its address (rank 0: also
the rendezvous port) from :meth:`Reporter.set_node` on; it keeps the gang roster from the
first answer that carries one (:attr:`Reporter.roster`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

import httpx
from pydantic import ValidationError

from core.models import utcnow
from core.models.agents import (
    AgentAction,
    AgentCommand,
    AgentPhase,
    AgentReport,
    GangRoster,
)
from scheduler.agent.retries import retrying
from scheduler.timing import REPORT_CONNECT_TIMEOUT_S, REPORT_TIMEOUT_S

logger = logging.getLogger(__name__)

LINES_PER_REPORT = 500  # AgentReport.log_lines accepts at most 500
# The spool's limits while the daemon is unreachable; older lines are dropped (the full output
# stays in WORK_DIR/job.log).
MAX_QUEUED_LINES = 20_000
MAX_QUEUED_BYTES = 16 * 1024 * 1024
MAX_LINE_CHARS = 4000
# The log lines of one report, as JSON: well under the API's agent body limit (2 MiB), which
# 500 long lines of non-ASCII text would exceed (a refused report would stall the spool).
MAX_REPORT_LOG_BYTES = 1024 * 1024
# Reports one send may chain to empty the spool after an outage (20 × 500 lines): the main
# loop goes back to watching the notice in between.
MAX_REPORTS_PER_SEND = 20


class ReportNotDelivered(Exception):
    """The daemon did not accept a report. ``transient`` says whether retrying may help."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def _size(line: str) -> int:
    """Bytes ``line`` takes in a report's JSON at most (escaped, quoted, a separator)."""
    return len(json.dumps(line)) + 1


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, ReportNotDelivered) and exc.transient


class Reporter:
    """Sends reports for one job attempt and queues the job's output lines between them.

    - **api_url**: daemon base URL, or several comma-separated (replicas, tried in turn).
      **token**: bearer token (never logged).
    - **instance_id**, **job_id**, **attempt**: who is reporting.
    - **rank** (optional): which node of a gang; default 0 (also a one-node job's).
    - **transport** (optional): an httpx transport, for tests.

    **roster**: the gang roster of the first answer that carried one (``None`` before, and
    always for a one-node job).

    :meth:`add_line` may be called from any thread; the send methods from one thread only.
    """

    def __init__(self, api_url: str, token: str, instance_id: str, job_id: str, attempt: int,
                 transport: httpx.BaseTransport | None = None,
                 max_queued_lines: int = MAX_QUEUED_LINES,
                 max_queued_bytes: int = MAX_QUEUED_BYTES, rank: int = 0) -> None:
        self.job_id, self.attempt, self.rank = job_id, attempt, rank
        self._node: dict[str, Any] = {}
        self.roster: GangRoster | None = None
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
        self._lines: deque[tuple[int, str, int]] = deque()  # number, line, _size(line)
        self._max_lines, self._max_bytes = max_queued_lines, max_queued_bytes
        self._bytes = 0
        self._next_seq = 0
        self._dropped = 0
        self._lock = threading.Lock()
        self._down_logged = False

    def close(self) -> None:
        self._http.close()

    def set_node(self, **fields: Any) -> None:
        """Put ``fields`` (a gang node's ``address``, ``master_port``) in every report from
        now on."""
        self._node = dict(fields)

    def add_line(self, line: str) -> None:
        """Queue one output line (without its newline) for the next report; when the spool is
        full, the oldest queued line is dropped (see the module docstring)."""
        line = line[:MAX_LINE_CHARS]
        size = _size(line)
        with self._lock:
            self._lines.append((self._next_seq, line, size))
            self._bytes += size
            self._next_seq += 1
            while len(self._lines) > 1 and (len(self._lines) > self._max_lines
                                            or self._bytes > self._max_bytes):
                self._bytes -= self._lines.popleft()[2]
                self._dropped += 1
                if self._dropped == 1:
                    logger.warning("output spool full (%d lines, %d bytes): dropping the oldest "
                                   "lines until the daemon answers", self._max_lines,
                                   self._max_bytes)

    def queued_lines(self) -> int:
        with self._lock:
            return len(self._lines)

    def _batch(self) -> tuple[list[str], int | None, int | None]:
        """The oldest queued lines one report carries (at most LINES_PER_REPORT and
        MAX_REPORT_LOG_BYTES, at least one line), the first and the last one's numbers."""
        batch: list[tuple[int, str, int]] = []
        size = 0
        with self._lock:
            for entry in islice(self._lines, LINES_PER_REPORT):
                size += entry[2]
                if batch and size > MAX_REPORT_LOG_BYTES:
                    break
                batch.append(entry)
        if not batch:
            return [], None, None
        return [line for _, line, _ in batch], batch[0][0], batch[-1][0]

    def _acknowledge(self, last_seq: int | None) -> None:
        with self._lock:
            while last_seq is not None and self._lines and self._lines[0][0] <= last_seq:
                self._bytes -= self._lines.popleft()[2]

    def _more_than_one_report(self) -> bool:
        lines, _, _ = self._batch()
        return len(lines) < self.queued_lines()

    def _post(self, phase: AgentPhase, fields: dict[str, Any]) -> AgentCommand:
        """One POST; raises :class:`ReportNotDelivered`."""
        lines, first_seq, last_seq = self._batch()
        message = fields.pop("message", None)
        report = AgentReport(job_id=self.job_id, attempt=self.attempt, phase=phase, at=utcnow(),
                             log_lines=lines, log_seq=first_seq, rank=self.rank,
                             message=message[:2000] if message else None,
                             **{**self._node, **fields})
        answer = self._post_to_a_replica(report.model_dump(mode="json"))
        if not answer.is_success:
            code = answer.status_code
            raise ReportNotDelivered(f"daemon answered HTTP {code}: {answer.text[:200]}",
                                     code in (408, 429))
        self._acknowledge(last_seq)
        try:
            command = AgentCommand.model_validate_json(answer.content)
        except ValidationError:
            logger.warning("daemon's answer is not an AgentCommand; continuing")
            return AgentCommand()
        if command.gang is not None and self.roster is None:
            self.roster = command.gang
        return command

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
        """Send a report now (heartbeat or phase change); ``fields`` are other
        :class:`AgentReport` fields (checkpoint_id, restored_from, notice, exit_code, message).
        While more output is queued than one report carries (after an outage), more reports
        of the same phase follow at once, up to ``MAX_REPORTS_PER_SEND`` in all.

        Returns the daemon's (last) command, or ``None`` when the first report was not
        delivered (logged once per outage; never raises for the daemon being down).
        """
        command = None
        for _ in range(MAX_REPORTS_PER_SEND):
            try:
                command = self._post(phase, dict(fields))
            except ReportNotDelivered as exc:
                if not self._down_logged:
                    logger.warning("report %s not delivered: %s (will keep trying)",
                                   phase.value, exc)
                    self._down_logged = True
                return command
            if self._down_logged:
                logger.info("daemon reachable again")
                self._down_logged = False
            if command.action is not AgentAction.CONTINUE or self.queued_lines() == 0:
                break
        return command

    def send_final(self, phase: AgentPhase, interim_phase: AgentPhase,
                   on_wait: Callable[[], None] | None = None, **fields: Any) -> AgentCommand | None:
        """Deliver a final report (succeeded / failed / checkpointed), retrying transient
        failures with backoff (capped at 5 s) for up to 10 minutes.

        Queued output beyond what one report carries is sent first, in reports of
        ``interim_phase`` (the phase the daemon last saw), within the same retries, so the
        final report goes only with the last lines: once the daemon has it, it takes no more
        output of this attempt.

        - **on_wait** (optional): called between tries.

        Returns the daemon's command, or ``None`` if the report could not be delivered (the
        daemon stayed unreachable, or refused it: e.g. 403 for a revoked token).
        """
        interim = {k: v for k, v in fields.items() if k != "exit_code"}
        try:
            for attempt in retrying(f"final report {phase.value}", _transient, on_wait):
                with attempt:
                    while self._more_than_one_report():
                        self._post(interim_phase, dict(interim))
                    command = self._post(phase, dict(fields))
        except ReportNotDelivered as exc:
            logger.error("final report %s not delivered: %s", phase.value, exc)
            return None
        logger.info("final report %s delivered", phase.value)
        return command

"""The node agent's run: start → restore → run → (succeeded | failed | checkpointed).

One agent runs one attempt of one job on one instance, then exits:

1. report ``starting``; unpack the job's code bundle (if any) into ``WORK_DIR/job``;
2. report ``restoring``; restore the newest valid checkpoint into the checkpoint folder
   (steps 1 and 2 write the job folder as the job user where there is one, see
   :mod:`scheduler.agent.job_user`);
3. on a gang node (``GA_NNODES`` > 1, :mod:`scheduler.agent.gang`): report the node's
   address (rank 0 also its rendezvous port) and heartbeat, every loop tick, until the daemon's
   answer carries the gang's roster; a stop meanwhile ends the attempt ``checkpointed``
   without starting the command;
   start the command (see :mod:`scheduler.agent.job`; a gang node's with the rank
   environment); report ``running``;
4. every second: poll the preemption notice; every heartbeat: report (the answer may be
   ``stop``); every ``sync_interval_s``: commit the checkpoint folder if it changed; every
   ``GPU_SAMPLE_S``: read the GPUs (where NVML sees any, :mod:`scheduler.agent.gpus`).
   Every report carries the job's first and latest progress point of this attempt (read from
   ``SCHED_PROGRESS_FILE``, :mod:`scheduler.agent.progress`) and the GPU use since the last
   delivered report;
5. on a notice, a ``stop`` command, or SIGTERM/SIGINT to the agent: report ``checkpointing``,
   signal the job's group, wait ``grace_s`` (then SIGKILL), commit, acknowledge the notice
   once the commit landed (Azure's event approval), report ``checkpointed``;
   when the command exits by itself: commit (``final`` if it exited 0), report ``succeeded`` or
   ``failed``. Of a gang, only rank 0 commits (periodically and at the end); the other ranks
   never upload, and report their final phase without a checkpoint.

Exit status: 0 when the final report was delivered and the checkpoint landed, 1 otherwise,
2 for a bad environment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from core.models import PreemptionNotice
from core.models.agents import AgentAction, AgentPhase, GangRoster
from core.models.work import GpuSample
from scheduler.agent.gang import LocalNode
from scheduler.agent.gpus import GpuSampler, GpuWindow, open_gpu_sampler
from scheduler.agent.job import JobProcess, job_environment
from scheduler.agent.job_user import (
    WORK_DIR_MODE,
    Isolation,
    JobUserSync,
    choose,
    filesystem_identity,
    is_non_dumpable,
    restrict_umask,
    set_non_dumpable,
)
from scheduler.agent.notices import AwsImdsNotices, NoticeSource, make_notice_source
from scheduler.agent.progress import ProgressFile
from scheduler.agent.reporter import Reporter
from scheduler.agent.retries import retrying, store_error_is_transient
from scheduler.agent.settings import AgentSettings
from scheduler.agent.sync import CheckpointSync, NoSync
from scheduler.checkpoints import (
    ObjectStore,
    download_workdir,
    open_store,
    restore_latest,
)
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.secrets import redact_logs
from scheduler.timing import AGENT_HEARTBEAT_S, AGENT_LOOP_TICK_S

logger = logging.getLogger(__name__)

T = TypeVar("T")
EXIT_OK, EXIT_TROUBLE, EXIT_BAD_ENV = 0, 1, 2


class Agent:
    """One agent run for ``settings``; :meth:`run` does everything and returns the exit status.

    ``store``, ``notices`` and ``reporter`` default to the ones the settings name (tests may
    pass their own); ``gpus`` makes the GPU sampler (default: NVML's,
    :func:`~scheduler.agent.gpus.open_gpu_sampler`; ``None`` from it: no GPU). ``isolation``
    says who the command runs as (default: :func:`~scheduler.agent.job_user.choose` for the
    settings, which logs it); ``job_umask`` is the command's umask (default: the agent's).
    Not reusable: one instance, one run.
    """

    def __init__(self, settings: AgentSettings, store: ObjectStore | None = None,
                 notices: NoticeSource | None = None, reporter: Reporter | None = None,
                 gpus: Callable[[], GpuSampler | None] = open_gpu_sampler,
                 isolation: Isolation | None = None, job_umask: int = -1) -> None:
        self.settings = settings
        self.store = store if store is not None else open_store(settings.store_url)
        self.isolation = isolation or choose(
            settings.job_user, settings.work_dir,
            local_store=isinstance(self.store, LocalObjectStore),
            non_dumpable=is_non_dumpable())
        self.job_umask = job_umask
        self.notices = notices or make_notice_source(settings.metadata_flavor,
                                                     settings.metadata_url)
        self.reporter = reporter or Reporter(settings.api_url, settings.token, settings.instance_id,
                                             settings.job_id, settings.attempt,
                                             rank=settings.node_rank)
        spec = settings.spec
        user = self.isolation.user
        self.sync: CheckpointSync | NoSync
        if settings.node_rank != 0:
            self.sync = NoSync()  # rank 0 commits the gang's checkpoints
        elif user is None:
            self.sync = CheckpointSync(self.store, settings.job_id, settings.attempt,
                                       settings.checkpoint_dir, spec.checkpoint)
        else:
            self.sync = JobUserSync(self.store, settings.job_id, settings.attempt,
                                    settings.checkpoint_dir, spec.checkpoint, user)
        self.progress = ProgressFile(settings.progress_path)
        try:
            sampler = gpus()
        except Exception:  # a driver oddity must not keep the job from running
            logger.exception("GPU sampler failed to start; reporting no GPU use")
            sampler = None
        self.gpus = GpuWindow(sampler) if sampler is not None else None
        self.phase = AgentPhase.STARTING
        self.restored_from: str | None = None
        self.notice: PreemptionNotice | None = None
        self._watcher_failed = False
        self.note: str | None = None  # a one-off remark for the next report
        self._stop_reason: str | None = None
        self._rebalance_seen = False

    # -- reporting -----------------------------------------------------------------------------

    def _fields(self, **extra: Any) -> dict[str, Any]:
        self.progress.poll()
        fields: dict[str, Any] = dict(checkpoint_id=self.sync.checkpoint_id,
                                      restored_from=self.restored_from, notice=self.notice,
                                      progress=self.progress.latest,
                                      first_progress=self.progress.first, gpu=self._gpu_use())
        fields.update(extra)
        if self.note:
            fields["message"] = "; ".join(m for m in (fields.get("message"), self.note) if m)
        return fields

    def _gpu_use(self) -> GpuSample | None:
        """The GPU use since the last delivered report (a reading is taken first if due or if
        the window has none); ``None`` without a GPU."""
        if self.gpus is None:
            return None
        try:
            self.gpus.sample_if_due()
            return self.gpus.summary()
        except Exception:  # e.g. a driver's absurd numbers outside GpuSample's bounds
            logger.exception("GPU summary failed; reporting none")
            self.gpus.clear()
            return None

    def _report(self, phase: AgentPhase | None = None, **extra: Any) -> AgentAction | None:
        if phase is not None:
            self.phase = phase
        command = self.reporter.send(self.phase, **self._fields(**extra))
        if command is None:
            return None
        self.note = None
        if self.gpus is not None:
            self.gpus.clear()  # delivered: the next report covers the time from now on
        if command.action is AgentAction.STOP and self._stop_reason is None:
            self._stop_reason = f"daemon asked to stop ({command.reason or 'no reason given'})"
        return command.action

    def _heartbeat(self) -> None:
        self._report()

    def _final(self, phase: AgentPhase, ok: bool, **extra: Any) -> int:
        interim = self.phase
        self.phase = phase
        delivered = self.reporter.send_final(phase, interim, self._heartbeat_as(interim),
                                             **self._fields(**extra))
        return EXIT_OK if ok and delivered is not None else EXIT_TROUBLE

    def _heartbeat_as(self, phase: AgentPhase) -> Callable[[], None]:
        return lambda: self.reporter.send(phase, **self._fields())

    # -- steps ---------------------------------------------------------------------------------

    def _with_store_retries(self, what: str, call: Callable[[], T]) -> T:
        for attempt in retrying(what, store_error_is_transient, self._heartbeat):
            with attempt:
                return call()
        raise AssertionError("unreachable")  # tenacity either returns or raises

    def _job_dir(self) -> contextlib.AbstractContextManager[None]:
        """Create the job folder (the job user's, where there is one) and return the context
        to fill it in: the job user's filesystem identity, so what is unpacked and restored
        is created as its files and a process of that user can never steer a root write."""
        s, user = self.settings, self.isolation.user
        s.job_dir.mkdir(parents=True, exist_ok=True)
        if user is None:
            return contextlib.nullcontext()
        os.chown(s.job_dir, user.uid, user.gid, follow_symlinks=False)
        return filesystem_identity(user)

    def _prepare(self) -> bool:
        """Unpack the code and restore the checkpoint; ``False`` (after reporting ``failed``)
        when the job cannot be started safely."""
        s = self.settings
        self._report(AgentPhase.STARTING)
        try:
            with self._job_dir():
                if self._with_store_retries(
                        "code download", lambda: download_workdir(self.store, s.job_id, s.job_dir)):
                    logger.info("code bundle unpacked into %s", s.job_dir)
                self._report(AgentPhase.RESTORING)
                manifest = self._with_store_retries(
                    "checkpoint restore",
                    lambda: restore_latest(self.store, s.job_id, s.checkpoint_dir))
                s.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        except Exception as exc:
            # Starting from scratch while the store is merely unreachable would overwrite the
            # job's progress with an earlier state, so the agent gives up instead.
            logger.error("cannot prepare the job: %s", exc)
            self._final(AgentPhase.FAILED, ok=False,
                        message=f"agent could not prepare the job: {exc}")
            return False
        if manifest is not None:
            self.restored_from = manifest.checkpoint_id
            self.sync.mark_restored(manifest.checkpoint_id)
        return True

    def _hand_over(self) -> None:
        """Give the job user the rest of what the job writes (its folder already is its
        own): a progress file in the agent's folder, which it may pass through but not list.
        Raises ``OSError``."""
        s, user = self.settings, self.isolation.user
        assert user is not None
        os.chmod(s.work_dir, WORK_DIR_MODE)
        user.create_file(s.progress_path)

    def _await_roster(self) -> tuple[LocalNode, GangRoster] | None:
        """Report this gang node ready (its address; rank 0's port) and heartbeat every loop
        tick until the daemon sends the gang's roster. ``None`` when stopped first (a stop
        answer, a notice, SIGTERM); no time limit of its own: the daemon's gang timeout
        terminates the instances. Raises ``OSError`` (no address), ``RuntimeError`` (a roster
        that cannot be this gang's)."""
        s = self.settings
        node = LocalNode.find(s.node_rank, s.nnodes, s.api_url, s.node_address, s.master_port)
        self.reporter.set_node(**node.report_fields())
        logger.info("gang node %d of %d ready at %s%s; waiting for the other nodes", node.rank,
                    node.nnodes, node.address,
                    f" (rendezvous port {node.master_port})" if node.master_port else "")
        while self._stop_reason is None:
            self._report()
            roster = self.reporter.roster
            if roster is not None:
                problem = node.check(roster)
                if problem is not None:
                    raise RuntimeError(problem)
                logger.info("gang complete: %s", ", ".join(roster.addresses))
                return node, roster
            self._poll_notices()
            if self._stop_reason is None:
                time.sleep(AGENT_LOOP_TICK_S)
        return None

    def _start_job(self, gang: tuple[LocalNode, GangRoster] | None = None) -> JobProcess | None:
        s, user = self.settings, self.isolation.user
        env = job_environment(os.environ, s.spec, s.checkpoint_dir,
                              resumed=self.restored_from is not None, job_id=s.job_id,
                              progress_file=s.progress_path)
        if gang is not None:
            node, roster = gang
            env.update(node.environment(roster, s.spec.env))
        self.progress.reset()
        try:
            if user is not None:
                self._hand_over()
                env.update({k: v for k, v in user.environment(s.job_dir).items()
                            if k not in s.spec.env})  # the spec's own HOME wins
            return JobProcess.start(s.spec.command, s.job_dir, env, s.log_path,
                                    self.reporter.add_line, user=user, umask=self.job_umask)
        except (OSError, ValueError) as exc:  # ValueError: e.g. a NUL byte in the environment
            logger.error("cannot start the command: %s", exc)
            self._final(AgentPhase.FAILED, ok=False, message=f"cannot start the command: {exc}")
            return None

    def _poll_notices(self) -> None:
        try:
            self._read_notices()
        except Exception:
            # A watcher's bug must not take the job down unsupervised and uncheckpointed: no
            # notice this time, logged once.
            if not self._watcher_failed:
                self._watcher_failed = True
                logger.exception("preemption notice watcher failed; assuming no notice")

    def _read_notices(self) -> None:
        if self.notice is None:
            self.notice = self.notices.poll()
            if self.notice is not None:
                logger.warning("preemption notice: %s at %s", self.notice.action,
                               self.notice.action_at.isoformat())
                self._stop_reason = self._stop_reason or "preemption notice"
        if isinstance(self.notices, AwsImdsNotices) and not self._rebalance_seen:
            noticed_at = self.notices.rebalance_recommendation()
            if noticed_at is not None:
                self._rebalance_seen = True
                self.note = f"AWS rebalance recommendation at {noticed_at.isoformat()}"
                logger.warning("%s", self.note)

    def _supervise(self, job: JobProcess) -> int:
        """The main loop; returns the agent's exit status."""
        next_heartbeat = time.monotonic() + AGENT_HEARTBEAT_S
        while True:
            code = job.wait(AGENT_LOOP_TICK_S)
            if code is not None:
                return self._after_exit(job, code)
            self._poll_notices()
            if self.gpus is not None:
                self.gpus.sample_if_due()  # never raises: a failed reading is skipped
            if self._stop_reason is None:
                self.sync.tick()
                if time.monotonic() >= next_heartbeat:
                    next_heartbeat = time.monotonic() + AGENT_HEARTBEAT_S
                    self._report()
            if self._stop_reason is not None:
                return self._checkpoint_and_exit(job, self._stop_reason)

    def _commit_after_exit(self, final: bool, force: bool) -> tuple[bool, str | None]:
        """(landed, message): a store outage lasting the whole retry budget leaves the files
        local and is reported rather than raised."""
        try:
            self.sync.final_commit(final, force, self._heartbeat_as(self.phase))
            return True, None
        except Exception as exc:
            logger.error("checkpoint not uploaded: %s", exc)
            return False, (f"checkpoint upload failed ({exc}); files kept in "
                           f"{self.settings.checkpoint_dir}")

    def _checkpoint_and_exit(self, job: JobProcess, reason: str) -> int:
        logger.info("checkpointing: %s", reason)
        self._report(AgentPhase.CHECKPOINTING, message=reason)
        spec = self.settings.spec.checkpoint
        code = job.stop(spec.signal_number(), spec.grace_s, self._heartbeat, AGENT_HEARTBEAT_S)
        job.finish()
        logger.info("job exited with %d after %s", code, spec.signal)
        landed, problem = self._commit_after_exit(final=False, force=False)
        if landed and self.notice is not None:
            # Only now may the cloud take the instance (Azure then evicts without waiting for
            # NotBefore); the final report follows, as the instance may go at any moment.
            self.notices.acknowledge()
        return self._final(AgentPhase.CHECKPOINTED, landed, exit_code=code,
                           message="; ".join(m for m in (reason, problem) if m))

    def _after_exit(self, job: JobProcess, code: int) -> int:
        job.finish()
        logger.info("job exited with %d", code)
        landed, problem = self._commit_after_exit(final=code == 0, force=code == 0)
        if code == 0 and not landed:
            # Success without its final checkpoint in the store would lose the result: report
            # an agent failure (no exit code), which the daemon retries from the last commit.
            return self._final(AgentPhase.FAILED, False, exit_code=None,
                               message=f"command exited 0 but {problem}")
        phase = AgentPhase.SUCCEEDED if code == 0 else AgentPhase.FAILED
        return self._final(phase, landed, exit_code=code, message=problem)

    def _on_signal(self, signum: int, _frame: object) -> None:
        # The instance is being shut down under us: treat it like a notice.
        self._stop_reason = self._stop_reason or f"agent received {signal.Signals(signum).name}"

    def run(self) -> int:
        """Run the whole attempt; returns the process exit status (see the module docstring)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        job: JobProcess | None = None
        try:
            if not self._prepare():
                return EXIT_TROUBLE
            gang = None
            if self.settings.is_gang and self._stop_reason is None:
                gang = self._await_roster()
            if self._stop_reason is not None:  # stopped before the command ever ran
                return self._final(AgentPhase.CHECKPOINTED, True, message=self._stop_reason)
            job = self._start_job(gang)
            if job is None:
                return EXIT_TROUBLE
            self._report(AgentPhase.RUNNING)
            return self._supervise(job)
        except Exception as exc:
            # A bug or an unforeseen condition: never leave the daemon guessing (it would wait
            # for the heartbeat timeout) nor the job running unsupervised.
            logger.exception("agent failed")
            if job is not None:
                job.signal_group(signal.SIGKILL)
            return self._final(AgentPhase.FAILED, False, exit_code=None,
                               message=f"agent error: {type(exc).__name__}: {exc}")
        finally:
            self.sync.close()
            self.notices.close()
            if self.gpus is not None:
                self.gpus.sampler.close()
            self.reporter.close()


def main() -> int:
    """Entry point of ``python -m scheduler.agent``: make the agent non-dumpable and its files
    private (umask 077), configure logging, read the environment, run. Returns the exit
    status."""
    # First, before the environment (the token) is read into any other object.
    set_non_dumpable()
    job_umask = restrict_umask()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per heartbeat and per S3 call would drown the agent's own log.
    for noisy in ("httpx", "httpcore", "botocore", "boto3", "s3transfer", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    redact_logs()  # its token and the store's keys never show, even quoted in an error
    try:
        settings = AgentSettings.from_env()
    except ValueError as exc:
        print(f"gpu-arbiter agent: {exc}", file=sys.stderr)
        return EXIT_BAD_ENV
    try:
        agent = Agent(settings, job_umask=job_umask)
    except ValueError as exc:  # e.g. a malformed GA_STORE_URL
        print(f"gpu-arbiter agent: {exc}", file=sys.stderr)
        return EXIT_BAD_ENV
    logger.info("agent for job %s attempt %d on %s", settings.job_id, settings.attempt,
                settings.instance_id)
    return agent.run()

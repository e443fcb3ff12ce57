"""Periodic checkpoint uploads in a background thread, so a slow upload of a large checkpoint
never delays noticing a preemption."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from core.models import CheckpointSpec
from scheduler.agent.retries import retrying, store_error_is_transient
from scheduler.checkpoints import (
    ObjectStore,
    commit_checkpoint,
    dir_fingerprint,
    prune_checkpoints,
)
from scheduler.checkpoints.checkpoints import Fingerprint
from scheduler.timing import AGENT_RETRY_FIRST_WAIT_S, AGENT_RETRY_MAX_WAIT_S

logger = logging.getLogger(__name__)

class CheckpointSync:
    """Commits ``src_dir`` to ``store`` when it changed, at most every
    ``checkpoint.sync_interval_s`` seconds, compressed as ``checkpoint.compression`` says, and
    after each commit applies the spec's retention (``keep_last``, ``keep_every``), never
    pruning the checkpoint this attempt restored from while it runs (the newest one the
    commit just wrote is what a restart restores: ``keep_last: 1`` keeps exactly it).
    The agent prunes rather than the daemon because it is the one committing: its own
    commits and prunes run on one thread and never overlap.

    A failed upload (store down) is retried with backoff (0.5 s doubling, capped at 5 s)
    instead of waiting for the next interval; the files stay local until one lands. Call
    :meth:`tick` from the agent loop and :meth:`final_commit` once the job has exited; both
    from the same thread.

    ``checkpoint_id`` is the newest checkpoint this agent committed (``None`` before the first).
    """

    def __init__(self, store: ObjectStore, job_id: str, attempt: int, src_dir: Path,
                 checkpoint: CheckpointSpec) -> None:
        self.store, self.job_id, self.attempt = store, job_id, attempt
        self.src_dir, self.spec = Path(src_dir), checkpoint
        self.interval_s = checkpoint.sync_interval_s
        self.checkpoint_id: str | None = None
        self.restored_from: str | None = None
        self._committed: Fingerprint | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-sync")
        self._future: Future[tuple[str | None, Fingerprint]] | None = None
        self._failures = 0
        self._due_mono = time.monotonic() + self.interval_s

    def mark_restored(self, checkpoint_id: str | None = None) -> None:
        """The folder now holds the restored checkpoint ``checkpoint_id``: do not upload it
        again unchanged, and never prune it while this attempt runs."""
        self._committed = dir_fingerprint(self.src_dir)
        self.restored_from = checkpoint_id

    def _commit(self, fingerprint: Fingerprint, final: bool) -> tuple[str | None, Fingerprint]:
        manifest = commit_checkpoint(self.store, self.job_id, self.src_dir, self.attempt,
                                     final=final, compression=self.spec.compression.value)
        if manifest is None:
            return None, fingerprint
        try:
            prune_checkpoints(self.store, self.job_id, keep_last=self.spec.keep_last,
                              keep_every=self.spec.keep_every,
                              protect=(self.restored_from,))
        except Exception as exc:  # pruning is housekeeping: the next commit prunes again
            logger.warning("pruning old checkpoints failed: %s", exc)
        return manifest.checkpoint_id, fingerprint

    def _collect(self) -> None:
        """Take the result of a finished background commit, if any."""
        if self._future is None or not self._future.done():
            return
        future, self._future = self._future, None
        try:
            checkpoint_id, fingerprint = future.result()
        except Exception as exc:
            self._failures += 1
            delay_s = min(AGENT_RETRY_MAX_WAIT_S, AGENT_RETRY_FIRST_WAIT_S * 2 ** (self._failures - 1))
            self._due_mono = time.monotonic() + delay_s
            logger.warning("checkpoint upload failed (%s); retrying in %.1f s", exc, delay_s)
            return
        self._failures = 0
        self._committed = fingerprint
        if checkpoint_id is not None:
            self.checkpoint_id = checkpoint_id

    def tick(self) -> None:
        """Start a background commit if one is due and the folder changed. Never blocks."""
        self._collect()
        if self._future is not None or time.monotonic() < self._due_mono:
            return
        self._due_mono = time.monotonic() + self.interval_s
        fingerprint = dir_fingerprint(self.src_dir)
        if fingerprint and fingerprint != self._committed:
            self._future = self._executor.submit(self._commit, fingerprint, False)

    def final_commit(self, final: bool, force: bool,
                     on_wait: Callable[[], None] | None = None) -> str | None:
        """Commit after the job exited, retrying a store that is down for up to 10 minutes.

        - **final**: mark the checkpoint as taken after a successful exit.
        - **force**: commit even if the folder did not change since the last commit.
        - **on_wait**: called between tries (the agent sends a heartbeat).

        Returns the newest checkpoint id this agent committed (``None`` if the folder is empty
        and nothing was ever committed). Raises :class:`CheckpointStoreError` when the store
        stayed unreachable (the files are still in ``src_dir``).
        """
        if self._future is not None:
            self._future.exception()  # wait for the in-flight upload; its outcome is collected
            self._collect()
        fingerprint = dir_fingerprint(self.src_dir)
        if not fingerprint:
            return self.checkpoint_id
        if not force and fingerprint == self._committed and self.checkpoint_id is not None:
            return self.checkpoint_id
        for attempt in retrying("checkpoint upload", store_error_is_transient, on_wait):
            with attempt:
                checkpoint_id, _ = self._commit(fingerprint, final)
        if checkpoint_id is not None:
            self.checkpoint_id = checkpoint_id
            self._committed = fingerprint
        return self.checkpoint_id

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class NoSync:
    """What a gang node other than rank 0 has instead of a :class:`CheckpointSync`: the same
    calls, and nothing ever uploaded (rank 0 alone commits the gang's checkpoints; the other
    ranks' folders are only restored into). ``checkpoint_id`` stays ``None``."""

    checkpoint_id: str | None = None

    def __init__(self) -> None:
        self.restored_from: str | None = None

    def mark_restored(self, checkpoint_id: str | None = None) -> None:
        self.restored_from = checkpoint_id

    def tick(self) -> None:
        pass

    def final_commit(self, final: bool, force: bool,
                     on_wait: Callable[[], None] | None = None) -> str | None:
        return None

    def close(self) -> None:
        pass

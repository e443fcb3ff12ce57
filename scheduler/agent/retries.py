"""The one retry policy of the agent: exponential backoff (0.5 s doubling, capped at 5 s) for
up to 10 minutes, for things that must eventually happen (final report, checkpoint upload,
restore) while the daemon or the store restarts."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from scheduler.checkpoints import CheckpointStoreError
from scheduler.timing import (
    AGENT_FINAL_RETRY_FOR_S,
    AGENT_RETRY_FIRST_WAIT_S,
    AGENT_RETRY_MAX_WAIT_S,
)

logger = logging.getLogger(__name__)


def store_error_is_transient(exc: BaseException) -> bool:
    """True for a store that could not be reached or refused for now; False for a missing
    object, a corrupt checkpoint or an unsafe bundle, which retrying will not change."""
    return type(exc) is CheckpointStoreError


def retrying(
    what: str,
    transient: Callable[[BaseException], bool],
    on_wait: Callable[[], None] | None = None,
    retry_for_s: float = AGENT_FINAL_RETRY_FOR_S,
) -> Retrying:
    """A tenacity ``Retrying`` for ``what`` (used in log lines).

    - **transient**: which exceptions are retried; any other is raised at once.
    - **on_wait** (optional): called before each sleep, e.g. to send a heartbeat meanwhile.
    - **retry_for_s**: give up (re-raising the last error) after this many seconds.
    """

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        logger.warning("%s failed (try %d: %s); retrying in %.1f s", what, state.attempt_number,
                       exc, state.next_action.sleep if state.next_action else 0.0)
        if on_wait is not None:
            on_wait()

    return Retrying(
        stop=stop_after_delay(retry_for_s),
        wait=wait_exponential(multiplier=AGENT_RETRY_FIRST_WAIT_S, max=AGENT_RETRY_MAX_WAIT_S),
        retry=retry_if_exception(transient),
        before_sleep=before_sleep,
        reraise=True,
    )

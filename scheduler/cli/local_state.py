"""Redis opened by the CLI itself, for the commands that work without a daemon: ``history
import``, ``history retention`` and ``plan`` when no daemon answers. Every other command
goes through the daemon's API (:mod:`scheduler.cli.client`)."""

from __future__ import annotations

from pathlib import Path

from scheduler.cli.client import CliError


def direct_store(home: Path | None):
    """A :class:`~scheduler.store.Store` over ``REDIS_URL``, else over the embedded Redis of
    ``home`` (default ``GA_HOME``), started if needed and stopped again when the command exits
    (unless a daemon uses it by then). Raises :class:`CliError` when Redis cannot be reached."""
    from core.config import home_dir
    from scheduler.store import Store
    from scheduler.store.connection import RedisUrlError, connect

    try:
        return Store.over(connect(home=home or home_dir(), stop_on_exit=True))
    except RedisUrlError as exc:  # its message names REDIS_URL and what is wrong with it
        raise CliError(str(exc)) from None
    except Exception as exc:  # the embedded server failed to start
        raise CliError(f"cannot reach Redis: {exc}") from None

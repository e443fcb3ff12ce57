"""Commands over keys in many hash slots, the same on one Redis and on a Redis Cluster.

A cluster refuses one MGET over keys of several slots, and its pipelines refuse EVALSHA; a
single server takes both. These helpers pick the way each client kind takes:

- :func:`mget`: values of many keys, in order (one MGET on one server; one MGET per slot,
  pipelined, on a cluster). Not atomic across slots on a cluster: each value is as of its
  own read, which is all the callers need (reports, leases, job records read for display).
- :func:`run_script_many`: one registered Lua script called for many key sets in one round
  trip (a pipeline, not a transaction: each call is atomic on its own).
- :func:`transaction`: a WATCH/MULTI pipeline whose WATCH a lost connection ends (a
  ``WatchError``) on a cluster as on one server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    SlotNotCoveredError,
    TryAgainError,
    WatchError,
)


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a Redis Cluster client (keys of one command, transaction or
    script must then share a hash slot)."""
    return isinstance(client, RedisCluster)


def mget(client: Any, keys: Sequence[str]) -> list[Any]:
    """The value of each of ``keys`` (``None`` when missing), in order; ``[]`` for none.
    Raises ``redis.RedisError``."""
    keys = list(keys)
    if not keys:
        return []
    if is_cluster(client):
        return client.mget_nonatomic(keys)
    return client.mget(keys)


def run_script_many(client: Any, script: Script,
                    calls: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> list[Any]:
    """``script(keys=k, args=a)`` for each ``(k, a)`` of ``calls``, pipelined; returns the
    replies in order. A call's keys must share one hash slot (as for any script on a
    cluster). On a cluster, a node that does not know the script yet (a new or promoted
    master) gets it loaded and that node's calls are repeated one by one.

    Raises ``redis.RedisError``: the first error a call got."""
    if not calls:
        return []
    if not is_cluster(client):
        with client.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                script(keys=list(keys), args=list(args), client=pipe)
            return pipe.execute()
    # The cluster pipeline blocks its evalsha method but routes a raw EVALSHA by its keys.
    with client.pipeline(transaction=False) as pipe:
        for keys, args in calls:
            queue_evalsha(pipe, client, script.sha, keys, args)
        replies = pipe.execute(raise_on_error=False)
    for index, reply in enumerate(replies):
        if isinstance(reply, NoScriptError):
            keys, args = calls[index]
            replies[index] = script(keys=list(keys), args=list(args))  # loads it, then runs
        elif isinstance(reply, Exception):
            raise reply
    return replies


def queue_evalsha(pipe: Any, client: Any, sha: str, keys: Sequence[str],
                  args: Sequence[Any]) -> None:
    """Queue ``EVALSHA sha`` of ``keys`` and ``args`` on ``pipe`` (a pipeline of ``client``).
    On a cluster the call goes to the node that serves its first key's slot in the slot map
    the client holds: left to route it, redis-py's cluster pipeline asks a node ``COMMAND
    GETKEYS`` for every queued script, one round trip each, before sending any. (A slot that
    moved meanwhile answers MOVED, and the pipeline's retry routes the call by its keys.)"""
    if keys and is_cluster(client):
        pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args,
                             target_nodes=client.get_node_from_key(keys[0]))
    else:
        pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)


# What ends a cluster transaction's WATCH: its connection, or its slot, went elsewhere.
_WATCH_LOST = (redis.ConnectionError, redis.TimeoutError, OSError, ClusterDownError,
               SlotNotCoveredError, MovedError, AskError, TryAgainError)


class _NoRetryWhileWatching:
    """The retry of a cluster transaction pipeline: its own until a WATCH succeeded, then
    none. redis-py's cluster transaction retries a command (EXEC included) that lost its
    connection on a new one, where nothing is watched: the write would then go through
    unchecked, over a newer write of another replica or past a lost lease. One server's
    pipeline raises ``WatchError`` instead; so does this one. (The WATCH itself is retried,
    as on one server: nothing was watched yet.)"""

    def __init__(self, inner: Any, strategy: Any) -> None:
        self._inner = inner
        self._strategy = strategy
        self._watched = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        watching = self._strategy._watching
        if not (watching and self._watched):
            reply = self._inner.call_with_retry(do, fail, is_retryable, with_failure_count)
            self._watched = watching and self._strategy._watching
            return reply
        try:
            return do()
        except WatchError:
            raise
        except _WATCH_LOST as error:
            # Drops the dead connection and refreshes the slot map for the caller's retry.
            fail(error, 1) if with_failure_count else fail(error)
            raise WatchError(f"{type(error).__name__} while watching: {error}") from error
        finally:
            self._watched = self._strategy._watching


def transaction(client: Any) -> Any:
    """``client.pipeline(transaction=True)``, for WATCH/MULTI/EXEC: once a key is watched,
    a connection lost (a failover) or a slot moved raises ``redis.WatchError`` (retry from
    a fresh read), on a cluster as on one server; before that, commands are retried as
    usual."""
    pipe = client.pipeline(transaction=True)
    if is_cluster(client):
        strategy = pipe._execution_strategy  # redis-py's cluster TransactionStrategy
        strategy._retry = _NoRetryWhileWatching(strategy._retry, strategy)
    return pipe

"""Commands over keys in many hash slots, the same on one Redis and on a Redis Cluster.

A cluster refuses one MGET over keys of several slots, and its pipelines refuse EVALSHA; a
single server takes both. These helpers pick the way each client kind takes:

- :func:`mget`: values of many keys, in order (one MGET on one server; one MGET per slot,
  pipelined, on a cluster). Not atomic across slots on a cluster: each value is as of its
  own read, which is all the callers need (reports, leases, job records read for display).
- :func:`run_script_many`: one registered Lua script called for many key sets in one round
  trip (a pipeline, not a transaction: each call is atomic on its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError


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
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        replies = pipe.execute(raise_on_error=False)
    for index, reply in enumerate(replies):
        if isinstance(reply, NoScriptError):
            keys, args = calls[index]
            replies[index] = script(keys=list(keys), args=list(args))  # loads it, then runs
        elif isinstance(reply, Exception):
            raise reply
    return replies

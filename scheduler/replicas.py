"""What several daemon replicas on one Redis must share, settled when a daemon starts.

- **owner id**: the ownership tag on every instance. Replicas describe and sweep instances by
  it, so they must use one: otherwise a replica could not see (take over) the instances of a
  dead one, and its orphan sweep would not see the other replica's instances at all.
  ``GA_OWNER`` names it; else the first daemon on the Redis publishes its own (from
  ``GA_HOME/owner-id``) and the others adopt it. Not a secret.
- **checkpoint store URL**: the store agents write to and restores read from. ``GA_STORE_URL``
  names it; else the first daemon publishes its default (``file://GA_HOME/checkpoints``) and
  the others adopt it (right on one machine; on several, set an S3 ``GA_STORE_URL``). Store
  URLs never carry credentials (see :func:`scheduler.checkpoints.urls.open_store`).
- **replica id**: each replica's own identity, the same across its restarts
  (:func:`home_replica_id`); leases are held and replicas registered under it.
- **secrets**: the API token and the agent secret come from ``GA_API_TOKEN`` /
  ``GA_AGENT_SECRET`` (see :mod:`scheduler.secrets`); each live replica publishes only their
  fingerprints, and a replica whose secrets differ from a live one's is refused.

Errors: :class:`ReplicaConfigError` with what differs and which variable to set.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from scheduler.secrets import fingerprint
from scheduler.store import keys, multi
from scheduler.store.connection import RedisClient
from scheduler.timing import REPLICA_TTL_S

log = logging.getLogger(__name__)


class ReplicaConfigError(RuntimeError):
    """This daemon's configuration conflicts with the replicas already on the same Redis."""


def home_owner_id(home: Path) -> str:
    """``GA_HOME/owner-id``, created with a random ``ga-<12 hex>`` on first use."""
    path = home / "owner-id"
    if not path.exists():
        import secrets
        path.write_text(f"ga-{secrets.token_hex(6)}")
    return path.read_text().strip()


def home_replica_id(home: Path) -> str:
    """This replica's identity, the same for every daemon process on ``home``:
    ``<GA_HOME/replica-id>@<hostname>``, the file created with a random ``r-<12 hex>`` on first
    use. ``GA_HOME/daemon.lock`` lets one daemon at a time run on a home, so when a daemon
    holds it, any other process of this identity is gone (its leases may be taken over). The
    hostname is part of it: a home copied to another machine is another replica."""
    path = home / "replica-id"
    if not path.exists():
        import secrets
        tmp = home / "replica-id.tmp"
        tmp.write_text(f"r-{secrets.token_hex(6)}")
        os.replace(tmp, path)
    return f"{path.read_text().strip()}@{socket.gethostname()}"


def shared_owner(client: RedisClient, home: Path, explicit: str | None) -> str:
    """The installation's owner id (see the module docstring). Raises
    :class:`ReplicaConfigError` when ``explicit`` (``GA_OWNER``) differs from the published one."""
    proposed = explicit or home_owner_id(home)
    client.set(keys.SHARED_OWNER, proposed, nx=True)
    owner = client.get(keys.SHARED_OWNER)
    if explicit and owner != explicit:
        raise ReplicaConfigError(
            f"GA_OWNER={explicit!r} but the replicas on this Redis use owner {owner!r}; "
            "every replica must use the same owner (unset GA_OWNER to adopt it)")
    if owner != proposed:
        log.info("adopting owner id %s of the replicas on this Redis (GA_HOME had %s)",
                 owner, proposed)
    return owner


def shared_store_url(client: RedisClient, explicit: str | None, default: str) -> str:
    """The checkpoint store URL (see the module docstring). Raises :class:`ReplicaConfigError`
    when ``explicit`` (``GA_STORE_URL``) differs from the one the replicas use."""
    client.set(keys.SHARED_STORE_URL, explicit or default, nx=True)
    url = client.get(keys.SHARED_STORE_URL)
    if explicit and url != explicit:
        raise ReplicaConfigError(
            f"GA_STORE_URL={explicit!r} but the replicas on this Redis use {url!r}; checkpoints "
            "must be in one store (set the same GA_STORE_URL everywhere; to move the store, "
            f"stop every replica and delete the Redis key {keys.SHARED_STORE_URL})")
    if not explicit and url != default:
        log.info("using the checkpoint store of the replicas on this Redis: %s", url)
    return url


class ReplicaRegistry:
    """This replica's entry among the live ones: ``keys.replica(id)`` holds JSON (API URL,
    pid, host, secret fingerprints) and expires ``REPLICA_TTL_S`` after the last
    :meth:`heartbeat`.

    ``replica_id`` is stable across restarts (:func:`home_replica_id`): a restarted daemon
    overwrites the entry its dead process left instead of seeing it as another replica."""

    def __init__(self, client: RedisClient, replica_id: str, api_url: str, api_token: str,
                 agent_secret: bytes) -> None:
        self._r = client
        self.replica_id = replica_id
        self.info: dict[str, Any] = {
            "id": replica_id, "api_url": api_url, "host": socket.gethostname(),
            "pid": os.getpid(), "api_token_fp": fingerprint(api_token),
            "agent_secret_fp": fingerprint(agent_secret),
        }

    def live(self) -> list[dict[str, Any]]:
        """Every live replica's entry, this one's included once it joined (SCAN walks every
        master of a cluster; an entry that expires meanwhile is left out)."""
        found = list(self._r.scan_iter(match=keys.replica("*"), count=100))
        return [json.loads(raw) for raw in multi.mget(self._r, found) if raw]

    def join(self) -> None:
        """Register, after checking the secrets against every live replica. Raises
        :class:`ReplicaConfigError` naming the variable that differs (never its value)."""
        for other in self.live():
            if other.get("id") == self.replica_id:
                continue
            where = f"replica {other.get('host')}:{other.get('pid')} ({other.get('api_url')})"
            for field, var in (("agent_secret_fp", "GA_AGENT_SECRET"),
                               ("api_token_fp", "GA_API_TOKEN")):
                if other.get(field) != self.info[field]:
                    raise ReplicaConfigError(
                        f"{var} differs from the one of live {where} on this Redis; replicas "
                        f"must share it (set the same {var} for every replica)")
        self.heartbeat()

    def heartbeat(self) -> None:
        self._r.set(keys.replica(self.replica_id), json.dumps(self.info),
                    px=int(REPLICA_TTL_S * 1000))

    def leave(self) -> None:
        self._r.delete(keys.replica(self.replica_id))


def failover_warning(live: list[dict[str, Any]], replica_id: str, api_url: str,
                     advertise_url: str | None) -> str | None:
    """Why agents of this replica's jobs could not fail over to the other ``live`` replicas,
    or ``None`` when they can (or there is no other replica).

    Agents report to the URLs of ``GA_ADVERTISE_URL`` (comma-separated, first that answers),
    else to this replica's own ``api_url``: with that alone, a replica killed for good leaves
    its agents reporting to a dead URL until the job is presumed lost."""
    others = [r for r in live if r.get("id") != replica_id]
    urls = [u.strip() for u in (advertise_url or "").split(",") if u.strip()]
    if not others or (urls and urls != [api_url]):
        return None
    where = "unset" if not urls else f"only this replica's URL ({api_url})"
    seen = ", ".join(sorted(str(r.get("api_url")) for r in others))
    return (f"{len(others)} other live replica(s) on this Redis ({seen}) but GA_ADVERTISE_URL "
            f"is {where}: agents of this replica's jobs cannot fail over when it dies (the "
            "jobs are presumed lost instead). Give every replica a fixed --port and list all "
            "of them in GA_ADVERTISE_URL, e.g. GA_ADVERTISE_URL=http://host-a:8740,"
            "http://host-b:8741, the same on every replica")

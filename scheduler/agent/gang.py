"""One node of a gang, as its agent sees it: where peers reach this node, the rendezvous port
rank 0 offers, and the rank environment the command gets once the daemon sends the roster.

The agent of a gang node (``GA_NNODES`` > 1) reports its ``rank`` in every report and, once it
has prepared the job (code unpacked, checkpoint restored), its ``address`` (rank 0 also its
``master_port``): an address is this node saying "ready". The daemon answers with the gang's
:class:`~core.models.agents.GangRoster` once every rank did, and only then does the command
start, with :meth:`GangRoster.environment` added to its environment.
"""

from __future__ import annotations

import logging
import random
import re
import socket
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from core.models.agents import ADDRESS_PATTERN, GangRoster

logger = logging.getLogger(__name__)

# Any port will do for a UDP "connect": it sends nothing, it only picks the route.
_DEFAULT_PORTS = {"http": 80, "https": 443}


def route_address(api_url: str) -> str:
    """This host's address on its route to the daemon: the source address of a UDP socket
    "connected" to the first host of ``api_url`` (comma-separated URLs) that resolves and
    routes. No packet is sent. An address peers of the same network reach this node at,
    without asking a metadata service (the daemon's own host gives 127.0.0.1 on one machine).

    Raises ``OSError`` when no URL's host gives a usable address (IPv6 link-local addresses,
    which need a zone, are skipped).
    """
    problems = []
    for url in (u.strip() for u in api_url.split(",") if u.strip()):
        parts = urlsplit(url)
        host = parts.hostname
        if not host:
            problems.append(f"{url}: no host")
            continue
        try:
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)
            family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect(sockaddr)
                address = probe.getsockname()[0]
        except (OSError, ValueError) as exc:
            problems.append(f"{url}: {exc}")
            continue
        if address in ("0.0.0.0", "::") or not re.fullmatch(ADDRESS_PATTERN, address):
            problems.append(f"{url}: unusable source address {address!r}")
            continue
        return address
    raise OSError("cannot find this node's address (set GA_NODE_ADDRESS): " + "; ".join(problems))


def ephemeral_ports() -> range:
    """The ports the kernel hands out to outgoing connections (Linux's
    ``ip_local_port_range``; its default elsewhere)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


# Ports this process gave out lately, not yet bound by whoever asked: never given twice.
_given: deque[int] = deque(maxlen=256)


def free_port(address: str) -> int:
    """A TCP port that is free on ``address`` now, for the job's rendezvous to bind later.

    Taken below the kernel's ephemeral range where it can be: a port bound and released from
    that range may be the local port of any outgoing connection made before the job binds it
    (seconds later, after the job imported its framework), and the rendezvous then fails. A
    port below it is free until someone binds it on purpose. Falls back to a port the kernel
    picks (port 0), and to the wildcard address when ``address`` is not one of this host's
    (e.g. a public address behind NAT given as GA_NODE_ADDRESS).

    Raises ``OSError`` when no port can be bound at all."""
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM,
                                                       flags=socket.AI_PASSIVE)[0]
        host = sockaddr[0]
    except OSError:
        family, host = socket.AF_INET, "0.0.0.0"
    ephemeral = ephemeral_ports()
    below = range(max(1024, ephemeral.start - 16384), ephemeral.start)
    pick = random.SystemRandom()
    for port in [pick.choice(below) for _ in range(64)] if len(below) else []:
        if port not in _given and port_bindable(family, host, port):
            _given.append(port)
            return port
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        try:
            listener.bind((host, 0))
        except OSError:
            listener.bind(("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0))
        return listener.getsockname()[1]


def port_bindable(family: int, host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` can be bound now (bound and released at once)."""
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class LocalNode:
    """This agent's node of a gang of ``nnodes``: its ``rank``, the ``address`` it reports and,
    on rank 0, the ``master_port`` it offers (``None`` on other ranks)."""

    rank: int
    nnodes: int
    address: str
    master_port: int | None

    @classmethod
    def find(cls, rank: int, nnodes: int, api_url: str, address: str | None = None,
             master_port: int | None = None) -> LocalNode:
        """The node for ``rank`` of ``nnodes``: ``address`` (default :func:`route_address` of
        ``api_url``) and, on rank 0, ``master_port`` (default :func:`free_port` on it).

        Raises ``OSError`` (no address found, no port free)."""
        address = address or route_address(api_url)
        port = None
        if rank == 0:
            port = master_port or free_port(address)
        return cls(rank=rank, nnodes=nnodes, address=address, master_port=port)

    def report_fields(self) -> dict[str, Any]:
        """What every report of this node carries once it is ready (see the module docstring)."""
        fields: dict[str, Any] = {"address": self.address}
        if self.master_port is not None:
            fields["master_port"] = self.master_port
        return fields

    def check(self, roster: GangRoster) -> str | None:
        """Why ``roster`` cannot be this node's gang (``None`` when it can): another node
        count, or no address for this rank."""
        if roster.nnodes != self.nnodes or len(roster.addresses) != self.nnodes:
            return (f"the daemon's gang roster has {roster.nnodes} nodes "
                    f"({len(roster.addresses)} addresses); this node is one of {self.nnodes}")
        return None

    def environment(self, roster: GangRoster, spec_env: Mapping[str, str]) -> dict[str, str]:
        """The rank environment for the command (``roster.environment(rank)``). It wins over
        the spec's own ``env``: a job whose spec names ``NODE_RANK`` or ``MASTER_ADDR`` would
        otherwise rendezvous with the wrong peers; such names are logged."""
        env = roster.environment(self.rank)
        overridden = sorted(k for k in env if k in spec_env and spec_env[k] != env[k])
        if overridden:
            logger.warning("the job spec's env sets %s; the gang's values are used instead",
                           ", ".join(overridden))
        if roster.addresses[self.rank] != self.address:
            logger.warning("the gang roster gives rank %d the address %s; this node reported %s",
                           self.rank, roster.addresses[self.rank], self.address)
        return env

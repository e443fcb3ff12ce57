"""The team's own GPU machines, reached over SSH (paramiko): a ``kind: fleet`` provider.

A **fleet** is a list of hosts; a **slot** is a set of whole GPUs of one host, given to one
instance (``CUDA_VISIBLE_DEVICES``). An instance is one node agent (``python3 -m
scheduler.agent``) started over SSH in its own session and process group in
``work_root/<client_token>``.

Offers
------
One offer per host and free slot size ``n`` in ``1 .. free GPUs`` of that host, all
``Market.ON_DEMAND``:

=====================  =====================================================================
``provider``           the entry's ``name`` (default ``fleet``)
``region``             the host's ``labels.site`` (default ``on-prem``)
``zone``               the host's ``labels.rack`` (default: the host's name)
``instance_type``      ``<host>.<n>x<gpu model>``, e.g. ``box1.2xRTX4090``: the host is part of
                       the type, so every slot shape of every host has its own offer key.
                       Host names are ``[A-Za-z0-9_-]`` (no ``.`` or ``/``); GPU models are the
                       project's names (:mod:`providers.catalog.gpus`, ``RTX4090``,
                       ``A100-80GB``): no ``/`` in any of the five key parts.
                       :func:`providers.fleet.slots.parse_slot_type` is the inverse.
``gpu_model``          the host's GPU model (one model per host)
``gpu_count``          ``n``; ``vram_gib`` per GPU
``vcpus``/``memory_gib``  the host's share for ``n`` of its GPUs (host total × n / GPUs)
``price_usd_per_hour``  ``cost_per_gpu_hour_usd × n`` (0 when not configured)
``interruption_risk``  0; ``interruption_notice_s`` ``None`` (only a drain warns, see below)
=====================  =====================================================================

Free GPUs = the host's GPUs − GPUs claimed in the ledger − GPUs busy with a process
gpu-arbiter did not start (``nvidia-smi --query-compute-apps``). A full, drained or
unreachable host lists no offer.

Instances
---------
``Instance.id`` is ``<host>.<client_token>``; the host is the part before the first ``.``.

Slot ledger (:class:`scheduler.store.fleet.FleetLedger`, Redis)
----------------------------------------------------------------
One ledger per fleet provider name, shared by every daemon replica; each call is atomic::

    FleetLedger(client, fleet: str)                       # fleet = the provider's name
    claim(host, free_gpu_indices, count, instance_id, detail=None) -> list[int] | None
        # count GPUs of free_gpu_indices not claimed by another instance, in the given
        # order; None when fewer are free or the host is drained. Claiming again for the same
        # instance_id returns its GPUs (idempotent). detail: str -> str mapping kept with it.
    release(instance_id) -> list[int]    # the GPUs freed; [] when it held none (idempotent)
    allocations() -> dict[str, dict[int, str]]            # {host: {gpu index: instance id}}
    claims() -> dict[str, Claim]   # {instance id: Claim(host, gpus, claimed_at, detail, ending_at)}
    drain(host) / undrain(host)            # idempotent; drain keeps the first drained_at
    drained() -> dict[str, datetime]       # {host: when it was drained}, aware UTC
    mark_seen(host, at) / last_seen() -> dict[str, datetime]   # last successful SSH contact
    mark_ending(instance_id) -> bool       # terminate while the host is unreachable: the
                                           # GPUs stay claimed until the host answers
    release(instance_id, claimed_at)       # only that claim (not a newer one of the instance)

A claim belongs to its instance, not to a replica: it has no expiry and is released only
when the instance ends (terminate, or describe finding the agent gone, or a claim whose
agent never started within the launch grace: the daemon was killed mid-launch).

Drain
-----
``drain(host)`` (``schedctl fleet drain HOST``) stops new claims on the host and makes
``describe`` report each of its running instances with a
:class:`core.models.PreemptionNotice` (``action="terminate"``, ``action_at = drained_at +
drain_notice_s``, default 120 s), so the controller checkpoints them and moves them like a
reclaimed spot instance; each such agent also gets one SIGTERM (it has no metadata service
to read a notice from), on which it stops its job, commits the checkpoint and reports
``checkpointed``. ``undrain(host)`` lists its free slots again.

Instances and failures
----------------------
An instance is its agent's session (the agent is started with ``setsid``; its job runs in a
process group of its own inside it): terminate sends SIGTERM to the agent's group and SIGKILL
to whatever of the session is left after ``terminate_grace_s``. A host that does not answer
lists no offers; its instances stay ``running`` in ``describe`` for ``host_lost_after_s``
(an SSH hiccup is not a lost job), then are ``terminated`` ("host unreachable"); their GPUs
stay claimed until the host answers again (:mod:`.provider` has the whole story). A launch on
a host that does not answer raises ``CapacityError`` (the job is placed elsewhere).

Modules: :mod:`.settings` (the strict config model), :mod:`.ssh` (verified, reused
connections), :mod:`.gpus` (``nvidia-smi`` CSV → GPUs), :mod:`.slots` (offers from free
GPUs, pure), :mod:`.remote` (the shell run on a host), :mod:`.provider`
(:class:`FleetProvider`: also ``settings.hosts``, ``inventory(host)``, ``ledger``),
:mod:`.setup` (``from_config``). The daemon hands every :class:`UsesSlotLedger` adapter its
ledger (this module imports no SSH library, so that check costs nothing without a fleet).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.store.fleet import FleetLedger


class UsesSlotLedger(ABC):
    """An adapter whose slot claims live in the shared Redis (a fleet)."""

    @abstractmethod
    def use_ledger(self, ledger: FleetLedger) -> None:
        """Claim slots in ``ledger`` (``FleetLedger(client, adapter.name)``) from now on."""

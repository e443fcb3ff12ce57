"""The fleet adapter: the team's own hosts as on-demand offers, instances as node agents
started over SSH. Offer shape, instance ids, the slot ledger and drain: :mod:`providers.fleet`.

Each call asks every host over SSH what it has (:func:`providers.fleet.remote.inventory`,
hosts in parallel) and reads the slot ledger; the host is the truth about which agents run,
the ledger about which GPUs are promised, and a GPU counts as taken when either says so.

**An unreachable host** (connection refused, timed out, host key refused) lists no offers.
``describe`` reports its claimed instances from the ledger: ``running`` while the host was
last seen less than ``host_lost_after_s`` ago (an SSH flake is not a lost job: the agent
reports to the daemon directly, and the controller's agent-silence rule,
``GA_AGENT_LOST_AFTER_S``, still catches a dead agent), ``terminated`` ("host unreachable")
after that, so the controller resumes the job elsewhere from its latest checkpoint.
``terminate`` on an unreachable host marks the claim as ending and returns: the GPUs stay
claimed until the host answers, when ``describe`` stops what is left there and frees them.

**A launch that died** (daemon killed between claim and start): its claim outlives it. Once
``launch_grace_s`` passed since the claim, ``describe`` finds no agent for it on the host
and releases it (and marks the half-made folder ended, so a late retry cannot revive it).
A launch resumed with the same client token within the grace finishes the first one's work.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from core.models import (
    TAG_OWNER,
    Instance,
    InstanceState,
    Offer,
    OfferKey,
    PreemptionNotice,
    PriceObservation,
)
from core.models.base import utcnow
from providers.base import Checked, CheckResult, Compute, ExactCapacity, LaunchRequest
from providers.bootstrap import env_file_text
from providers.errors import CapacityError, ProviderError, TransientError
from providers.fleet import UsesSlotLedger, remote
from providers.fleet.gpus import HostGpu, configured_gpus
from providers.fleet.settings import FleetSettings, HostSettings
from providers.fleet.slots import (
    free_indices,
    host_of,
    instance_id,
    parse_slot_type,
    slot_offers,
)
from providers.fleet.ssh import HostConnections
from scheduler.store.fleet import Claim, FleetLedger

log = logging.getLogger(__name__)

# A shipped agent's install (venv and pip) may take this long on a host.
INSTALL_TIMEOUT_S = 600.0

_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}\Z")
# Exit status of the remote start/prepare steps when the instance has ended already.
_ENDED_STATUS = 4


class FleetProvider(Compute, Checked, ExactCapacity, UsesSlotLedger):
    """Offers, launch, describe and terminate on the hosts of ``settings``. The slot
    ledger comes from the daemon (:meth:`use_ledger`); without one, offers count only
    what the hosts report and launch/terminate raise ``ProviderError``. ``clock`` gives
    aware UTC now. Safe to share between threads."""

    def __init__(self, settings: FleetSettings, ledger: FleetLedger | None = None,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.name = settings.name
        self.settings = settings
        self.ledger = ledger
        self._clock = clock
        self._ssh = HostConnections(settings.name, settings.known_hosts,
                                    settings.connect_timeout_s)
        self._pool = ThreadPoolExecutor(max_workers=min(8, len(settings.hosts)),
                                        thread_name_prefix=f"{settings.name}-ssh")
        self._prices_reported: dict[str, float] = {}
        self._last_offers: list[Offer] = []
        # The installation's owner tag, learnt from the tags it launches and describes with:
        # other installations sharing a host's work root have folders there too.
        self._owner: str | None = None

    def use_ledger(self, ledger: FleetLedger) -> None:
        """Use ``ledger`` (named after this provider) for slot claims from now on."""
        self.ledger = ledger

    @property
    def launch_grace_s(self) -> float:
        """How long a claim may stay without a started agent before describe abandons its
        launch: ``launch_grace_s``, plus the time a shipped agent's install may take."""
        if self.settings.agent.pip_spec is None:
            return self.settings.launch_grace_s
        return self.settings.launch_grace_s + self._install_timeout_s

    @property
    def _install_timeout_s(self) -> float:
        return max(INSTALL_TIMEOUT_S, self.settings.command_timeout_s)

    @property
    def agent_start_timeout_s(self) -> float:
        if self.settings.agent_start_timeout_s is not None:
            return self.settings.agent_start_timeout_s
        return 600.0 if self.settings.agent.pip_spec else 120.0

    # --- reading hosts --------------------------------------------------------------------

    def _ledger(self) -> FleetLedger:
        if self.ledger is None:
            raise ProviderError(f"{self.name}: no slot ledger (the daemon hands the fleet "
                                "provider its ledger on Redis)", provider=self.name)
        return self.ledger

    def _claims(self) -> dict[str, Claim]:
        return self.ledger.claims() if self.ledger is not None else {}

    def inventory(self, host: HostSettings, ours: set[int] = frozenset()) -> remote.Inventory:
        """What ``host`` has now (vCPUs, memory, GPUs, instance folders); ``ours``: GPU
        indices the ledger gives our instances. Marks the host seen in the ledger. Raises
        ``TransientError``/``AuthError`` when it cannot be asked."""
        result = self._ssh.run(host, remote.inventory(self.settings.work_root_of(host)),
                               self.settings.command_timeout_s)
        try:
            inventory = remote.parse_inventory(result.stdout, set(ours))
        except ValueError as exc:
            raise TransientError(f"{host.name}: {exc}; stderr: {result.stderr[-300:]}",
                                 provider=self.name, code="BadInventory") from None
        if inventory.gpus is None and inventory.gpu_error is None and host.gpus:
            inventory.gpus = configured_gpus(host.gpus)
        if host.vcpus:
            inventory.vcpus = host.vcpus
        if host.memory_gib:
            inventory.memory_gib = host.memory_gib
        if self.ledger is not None:
            self.ledger.mark_seen(host.name, self._clock())
        return inventory

    def _inventories(self, claims: dict[str, Claim]
                     ) -> dict[str, remote.Inventory | ProviderError]:
        """Every host's inventory (or why it could not be read), asked in parallel."""
        def ask(host: HostSettings) -> remote.Inventory | ProviderError:
            ours = {i for c in claims.values() if c.host == host.name for i in c.gpus}
            try:
                return self.inventory(host, ours)
            except ProviderError as exc:
                log.warning("fleet host %s: %s", host.name, exc)
                return exc
        hosts = self.settings.hosts
        return dict(zip([h.name for h in hosts], self._pool.map(ask, hosts), strict=True))

    @staticmethod
    def _taken(host: str, inventory: remote.Inventory, claims: dict[str, Claim]) -> set[int]:
        return inventory.held_gpus() | {i for c in claims.values() if c.host == host
                                        for i in c.gpus}

    # --- offers -----------------------------------------------------------------------------

    def _list_offers(self) -> list[Offer]:
        """Free slot shapes of every reachable, undrained host (:mod:`providers.fleet`).
        Raises ``TransientError`` only when no host could be asked."""
        claims = self._claims()
        drained = self.ledger.drained() if self.ledger is not None else {}
        inventories = self._inventories(claims)
        now = self._clock()
        offers: list[Offer] = []
        for host in self.settings.hosts:
            inventory = inventories[host.name]
            if isinstance(inventory, ProviderError) or host.name in drained:
                continue
            if inventory.gpus is None:
                log.warning("fleet host %s: %s: no offers", host.name,
                            inventory.gpu_error or "no nvidia-smi and no configured gpus")
                continue
            offers += slot_offers(self.name, host, inventory.gpus,
                                  self._taken(host.name, inventory, claims),
                                  inventory.vcpus, inventory.memory_gib, now)
        failed = [e for e in inventories.values() if isinstance(e, ProviderError)]
        if failed and len(failed) == len(inventories):
            raise TransientError(f"no fleet host answered: {failed[0]}", provider=self.name)
        self._last_offers = offers
        return offers

    def _poll_prices(self, since: datetime | None) -> list[PriceObservation]:
        """The price of each slot shape listed by the last :meth:`list_offers`, once per
        process and whenever it changed (prices are the configured costs)."""
        out = []
        for offer in self._last_offers:
            series = offer.key.series()
            if self._prices_reported.get(series) != offer.price_usd_per_hour:
                self._prices_reported[series] = offer.price_usd_per_hour
                out.append(PriceObservation(series=series, observed_at=offer.observed_at,
                                            price_usd_per_hour=offer.price_usd_per_hour))
        return out

    # --- instances --------------------------------------------------------------------------

    def _instance(self, iid: str, info: dict, state: InstanceState, *,
                  reason: str | None = None, notice: PreemptionNotice | None = None) -> Instance:
        """An instance from its ``meta.json`` or its claim's detail (the same fields)."""
        tags = info.get("tags") or {}
        if isinstance(tags, str):
            tags = json.loads(tags)
        return Instance(id=iid, provider=self.name, offer=OfferKey.from_series(info["offer"]),
                        client_token=info["client_token"], state=state,
                        launched_at=datetime.fromisoformat(info["launched_at"]), tags=tags,
                        notice=notice, terminated_reason=reason)

    def _stop(self, host: HostSettings, iid: str, grace_s: float, reason: str,
              claim: Claim | None = None, only_state: str = "") -> bool:
        """Stop the instance's process group on ``host`` (ended, logged), then free its
        GPUs (only ``claim`` when given: a newer claim of the instance stays). ``False``
        when ``only_state`` was given and the instance is no longer in it (nothing done).
        Raises ``ProviderError`` when the host cannot be asked."""
        token = iid.partition(".")[2]
        result = self._ssh.run(host, remote.stop(self.settings.work_root_of(host), token, iid,
                                                 grace_s, reason, only_state),
                               grace_s + self.settings.command_timeout_s)
        if only_state and result.status == 3:
            return False
        self._ok(host, result, f"stopping {iid}")
        if self.ledger is not None:
            freed = self.ledger.release(iid, claim.claimed_at if claim else None)
            if freed:
                log.info("fleet host %s: GPUs %s of %s released (%s)", host.name, freed, iid,
                         reason)
        return True

    def _notify(self, host: HostSettings, iid: str) -> None:
        """Tell the agent of ``iid`` that its host is drained (SIGTERM, once), so it
        checkpoints within the notice; its agent has no metadata service to read it from."""
        token = iid.partition(".")[2]
        self._ok(host, self._ssh.run(host, remote.notify(self.settings.work_root_of(host), token),
                                     self.settings.command_timeout_s), f"notifying {iid}")
        log.info("fleet host %s is drained: the agent of %s was told to checkpoint and stop",
                 host.name, iid)

    def _describe(self, tags: dict[str, str] | None) -> list[Instance]:
        """Every instance on the fleet's hosts and in its ledger, with a notice when its
        host is drained (its agent is sent SIGTERM once, see :func:`remote.notify`);
        unreachable hosts as the module docstring says. A host that fails is logged; this
        never raises for one host."""
        if tags and tags.get(TAG_OWNER):
            self._owner = tags[TAG_OWNER]
        claims = self._claims()
        drained = self.ledger.drained() if self.ledger is not None else {}
        inventories = self._inventories(claims)
        seen = self.ledger.last_seen() if self.ledger is not None else {}
        now = self._clock()
        out: list[Instance] = []
        for host in self.settings.hosts:
            mine = {iid: c for iid, c in claims.items() if c.host == host.name}
            inventory = inventories[host.name]
            if isinstance(inventory, ProviderError):
                out += self._unreachable(host, mine, seen.get(host.name), now)
                continue
            notice = None
            if host.name in drained:
                notice = PreemptionNotice(
                    action="terminate", received_at=now,
                    action_at=drained[host.name] + timedelta(seconds=self.settings.drain_notice_s))
            out += self._on_host(host, inventory, mine, notice, now)
        if tags:
            out = [i for i in out if all(i.tags.get(k) == v for k, v in tags.items())]
        return out

    def _unreachable(self, host: HostSettings, claims: dict[str, Claim],
                     last_seen: datetime | None, now: datetime) -> list[Instance]:
        out = []
        since = last_seen
        for iid, claim in claims.items():
            if "offer" not in claim.detail:
                continue
            last = max(since or claim.claimed_at, claim.claimed_at)
            if claim.ending_at is not None:
                out.append(self._instance(iid, claim.detail, InstanceState.TERMINATED, reason=(
                    "terminated; the host is unreachable, its processes are stopped when it "
                    "answers")))
            elif (now - last).total_seconds() > self.settings.host_lost_after_s:
                seen = f"since {since:%H:%M:%S} UTC" if since else "never reached"
                out.append(self._instance(iid, claim.detail, InstanceState.TERMINATED,
                                          reason=f"host {host.name} unreachable ({seen})"))
            else:
                out.append(self._instance(iid, claim.detail, InstanceState.RUNNING))
        return out

    def _on_host(self, host: HostSettings, inventory: remote.Inventory,
                 claims: dict[str, Claim], notice: PreemptionNotice | None,
                 now: datetime) -> list[Instance]:
        found = [self._found(host, iid, found, claims.get(iid), notice, now)
                 for iid, found in inventory.instances.items()
                 if self._ours(found, claims.get(iid))]
        out = [instance for instance in found if instance is not None]
        grace = self.launch_grace_s
        for iid, claim in claims.items():
            if iid in inventory.instances:
                continue
            if (now - claim.claimed_at).total_seconds() < grace:
                continue  # its launch is under way (see _found on unfinished launches)
            if self.ledger is not None:
                log.warning("fleet host %s: claim of %s (GPUs %s) has no instance there "
                            "after %.0f s: a launch that died; released", host.name, iid,
                            list(claim.gpus), grace)
                self.ledger.release(iid, claim.claimed_at)
        return out

    def _ours(self, found: remote.HostInstance, claim: Claim | None) -> bool:
        """Whether a folder is this installation's: its owner tag is ours (a claim in our
        ledger makes it ours too). Another installation's folders on a shared work root are
        neither reported nor touched: its own daemon stops, notifies and frees them."""
        tags = found.meta.get("tags")
        owner = tags.get(TAG_OWNER) if isinstance(tags, dict) else None
        if claim is not None or owner is None:
            return True
        return self._owner is None or owner == self._owner

    def _found(self, host: HostSettings, iid: str, found: remote.HostInstance,
               claim: Claim | None, notice: PreemptionNotice | None,
               now: datetime) -> Instance | None:
        """One instance folder of a host that answered, as describe reports it. What is left
        of an instance that ended (its agent exited, its launch died, it was terminated while
        the host was unreachable) is stopped here and its GPUs freed.

        A launch not finished within the launch grace is not reported (``None``): the
        controller adopts a reported instance by its client token and never launches it
        again, so a launch cut short (a daemon killed) would wait for an agent that nobody
        starts; unreported, the controller's next launch with the same token finishes it."""
        if found.state == "running" and (claim is None or claim.ending_at is None):
            if notice is not None and not found.noticed:
                try:
                    self._notify(host, iid)
                except ProviderError as exc:
                    log.warning("fleet host %s: could not notify %s: %s", host.name, iid, exc)
            return self._instance(iid, found.meta, InstanceState.RUNNING, notice=notice)
        if found.state == "ended":
            if claim is not None and self.ledger is not None:
                self.ledger.release(iid, claim.claimed_at)
            return self._instance(iid, found.meta, InstanceState.TERMINATED,
                                  reason=found.why_ended or "terminated")
        only = ""
        if found.state == "starting":
            started = claim.claimed_at if claim else datetime.fromisoformat(found.meta["launched_at"])
            if (now - started).total_seconds() < self.launch_grace_s:
                return None
            reason, only = "launch abandoned (its agent never started)", "starting"
        elif found.state == "running":
            reason = "terminated while its host was unreachable"
        else:
            reason = "agent exited"
        try:
            if not self._stop(host, iid, 0, reason, claim, only_state=only):
                # It started after the inventory was taken: running after all.
                return self._instance(iid, found.meta, InstanceState.RUNNING, notice=notice)
        except ProviderError as exc:
            log.warning("fleet host %s: could not end %s: %s", host.name, iid, exc)
            return self._instance(iid, found.meta, InstanceState.SHUTTING_DOWN, reason=reason)
        return self._instance(iid, found.meta, InstanceState.TERMINATED, reason=reason)

    def _launch(self, request: LaunchRequest) -> Instance:
        """Claim the slot, make ``work_root/<client_token>``, write ``meta.json`` and
        ``agent.env`` (0600, over SFTP), start the agent; idempotent on the client token.
        Raises ``CapacityError`` (slot taken, host drained, unknown or not answering: the
        job is placed elsewhere), ``AuthError`` (host key or user key refused),
        ``TransientError`` (the connection broke during the launch: a retry with the same
        token resumes it)."""
        try:
            return self._launch_on_host(request)
        except TransientError as exc:
            if exc.code != "Unreachable":
                raise
            # Waiting for a host that is down would hold the job; a claim made before it
            # went down is released by describe when it answers (launch grace).
            raise CapacityError(str(exc), provider=self.name, code="HostUnreachable") from None

    def _launch_on_host(self, request: LaunchRequest) -> Instance:
        ledger = self._ledger()
        if request.tags.get(TAG_OWNER):
            self._owner = request.tags[TAG_OWNER]
        offer = request.offer
        try:
            host_name, count, model = parse_slot_type(offer.instance_type)
        except ValueError as exc:
            raise CapacityError(str(exc), provider=self.name) from None
        host = self.settings.host(host_name)
        if host is None:
            raise CapacityError(f"no fleet host {host_name!r} (configured: "
                                f"{', '.join(h.name for h in self.settings.hosts)})",
                                provider=self.name)
        token = request.client_token
        if not _TOKEN_RE.match(token):
            raise ProviderError(f"client_token {token!r}: only [A-Za-z0-9_.-], not starting "
                                "with '.'", provider=self.name)
        iid = instance_id(host.name, token)
        claims = ledger.claims()
        inventory = self.inventory(host, {i for c in claims.values() if c.host == host.name
                                          for i in c.gpus})
        found = inventory.instances.get(iid)
        if found is not None and found.state in ("running", "stray"):
            return self._instance(iid, found.meta, InstanceState.RUNNING)
        if found is not None and found.state in ("ended", "exited"):
            return self._instance(iid, found.meta, InstanceState.TERMINATED,
                                  reason=found.why_ended or "agent exited")
        claim = claims.get(iid)
        if claim is not None and (self._clock() - claim.claimed_at).total_seconds() \
                > self.launch_grace_s / 2:
            # A launch resumed this late could meet describe abandoning it: start afresh.
            ledger.release(iid, claim.claimed_at)
            claim = None
        launched_at = claim.detail.get("launched_at") if claim else None
        info = {"instance_id": iid, "client_token": token, "offer": offer.key.series(),
                "tags": request.tags,
                "launched_at": launched_at or self._clock().isoformat()}
        gpus = list(claim.gpus) if claim else self._claim(host, inventory, claims, model, count,
                                                           iid, info)
        info["gpus"] = gpus
        work_root = self.settings.work_root_of(host)
        folder = f"{work_root}/{token}"
        # GA_WORK_DIR is set by the start step, where a work root under ~/ is resolved.
        env = {**request.agent_env, "GA_INSTANCE_ID": iid, "GA_METADATA_FLAVOR": "none"}
        prepared = self._ssh.run(host, remote.prepare(work_root, token),
                                 self.settings.command_timeout_s)
        if prepared.status == _ENDED_STATUS:
            ledger.release(iid)
            return self._instance(iid, info, InstanceState.TERMINATED,
                                  reason=prepared.stderr.strip() or "ended")
        self._ok(host, prepared, "creating the work directory")
        self._ssh.write_file(host, remote.sftp_path(f"{folder}/meta.json"), json.dumps(info),
                             0o600)
        self._ssh.write_file(host, remote.sftp_path(f"{folder}/agent.env"),
                             env_file_text(env), 0o600)
        agent = self.settings.agent
        if agent.pip_spec is not None:
            self._ok(host, self._ssh.run(host, remote.install_agent(agent.pip_spec, agent.venv),
                                         self._install_timeout_s),
                     "installing the agent")
        if iid not in ledger.claims():
            raise TransientError(f"{host.name}: the claim of {iid} was released during its "
                                 "launch", provider=self.name, code="ClaimLost")
        started = self._ssh.run(host, remote.start(work_root, token, iid, agent.interpreter,
                                                   gpus), self.settings.command_timeout_s)
        if started.status == _ENDED_STATUS:
            ledger.release(iid)
            return self._instance(iid, info, InstanceState.TERMINATED,
                                  reason=started.stderr.strip() or "ended")
        self._ok(host, started, "starting the agent")
        log.info("fleet host %s: started %s on GPUs %s (pid %s)", host.name, iid, gpus,
                 started.stdout.strip())
        return self._instance(iid, info, InstanceState.RUNNING)

    def _claim(self, host: HostSettings, inventory: remote.Inventory,
               claims: dict[str, Claim], model: str, count: int, iid: str,
               info: dict) -> list[int]:
        if inventory.gpus is None:
            raise CapacityError(f"{host.name}: no nvidia-smi and no configured gpus",
                                provider=self.name)
        free = free_indices(inventory.gpus, self._taken(host.name, inventory, claims), model)
        detail = {k: (json.dumps(v) if k == "tags" else v) for k, v in info.items()}
        got = self._ledger().claim(host.name, free, count, iid, detail, at=self._clock())
        if got is None:
            if host.name in self._ledger().drained():
                raise CapacityError(f"{host.name}: drained", provider=self.name, code="Drained")
            raise CapacityError(f"{host.name}: {count} {model} GPU(s) wanted; "
                                + self._taken_since(host.name, free), provider=self.name,
                                code="SlotTaken")
        return got

    def _taken_since(self, host: str, free: list[int]) -> str:
        """Which claims hold the GPUs seen free when the host was read (a launch that won
        the race for them), for the capacity error."""
        if not free:
            return "none free"
        holders = sorted((c.claimed_at, iid, [i for i in c.gpus if i in free])
                         for iid, c in self._ledger().claims().items()
                         if c.host == host and set(c.gpus) & set(free))
        taken = "; ".join(f"GPU {','.join(map(str, gpus))} by {iid} at "
                          f"{at:%H:%M:%S} UTC" for at, iid, gpus in holders)
        return (f"{len(free)} were free when the host was read, since claimed: {taken}"
                if taken else f"{len(free)} free")

    def _ok(self, host: HostSettings, result, what: str) -> None:
        if result.status != 0:
            raise TransientError(f"{host.name}: {what} failed (exit {result.status}): "
                                 f"{result.stderr.strip()[-300:]}", provider=self.name,
                                 code="RemoteCommandFailed")

    def _terminate(self, instance_id: str) -> None:
        """SIGTERM the instance's process group, SIGKILL after ``terminate_grace_s``, free
        its GPUs. Quiet for an unknown or ended instance; on an unreachable host the claim is
        marked ending (module docstring)."""
        host = self.settings.host(host_of(instance_id))
        if not _TOKEN_RE.match(instance_id.partition(".")[2]):
            # Not an id this adapter makes (<host>.<client token>): it never existed here,
            # and its "token" would name the work root or a folder above it.
            log.warning("fleet %s: terminate(%r) ignored: not a fleet instance id", self.name,
                        instance_id)
            return
        if host is None:
            if self.ledger is not None:
                self.ledger.release(instance_id)
            return
        try:
            self._stop(host, instance_id, self.settings.terminate_grace_s, "terminated")
        except ProviderError as exc:
            if self.ledger is None:
                raise
            marked = self.ledger.mark_ending(instance_id, self._clock())
            log.warning("fleet host %s unreachable, %s is stopped when it answers%s: %s",
                        host.name, instance_id, "" if marked else " (no claim held)", exc)

    def gpus_of(self, host: HostSettings) -> list[HostGpu] | None:
        """The host's GPUs now (``nvidia-smi``, else configured). Raises ``ProviderError``."""
        return self.inventory(host).gpus

    def gpu_report(self, host: HostSettings) -> tuple[list[HostGpu] | None, str | None]:
        """The host's GPUs now and why they could not be read (nvidia-smi failed or printed
        something else; ``None`` when read). Raises ``ProviderError`` when the host cannot
        be asked."""
        inventory = self.inventory(host)
        return inventory.gpus, inventory.gpu_error

    def check(self) -> list[CheckResult]:
        """One row per host: reached over SSH with a verified key, and the GPUs found."""
        rows = []
        for host in self.settings.hosts:
            try:
                gpus, error = self.gpu_report(host)
                detail = (error or "no nvidia-smi and no configured gpus" if gpus is None else
                          ", ".join(f"{g.index}:{g.model}{' (busy)' if g.foreign else ''}"
                                    for g in gpus) or "no GPUs")
                rows.append(CheckResult(self.name, host.site, f"ssh {host.name}",
                                        gpus is not None, detail))
            except ProviderError as exc:
                rows.append(CheckResult(self.name, host.site, f"ssh {host.name}", False, str(exc)))
        return rows

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._ssh.close()


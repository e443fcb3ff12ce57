"""The long-running service: pollers, the reconcile loop, the orphan sweep, and the HTTP API.

Started by ``schedctl daemon``. With no configuration it uses an embedded Redis, a local
checkpoint directory and the replayed example market, all under ``GA_HOME``. It writes
``GA_HOME/daemon.json`` (API URL, pid) for the CLI and reuses the same API port on restart so
agents launched before a restart keep reaching it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import redis
import uvicorn
from apscheduler.schedulers.background import BackgroundScheduler

from core.config import home_dir
from providers.base import Provider
from providers.replay import ReplayProvider
from scheduler import secrets as ga_secrets
from scheduler.api.app import create_app
from scheduler.checkpoints.urls import open_store
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.controller.orphans import sweep_orphans
from scheduler.controller.reconcile import reconcile_pass
from scheduler.daemon_config import BudgetConfig, ConfigError, load_budget_config
from scheduler.notify.budget_webhook import DELIVERY_LEASE, WebhookDeliverer
from scheduler.observability.providers import counted
from scheduler.poller.offers import OfferPoller
from scheduler.provider_setup import (
    ProviderConfigError,
    build_providers,
    default_entries,
)
from scheduler.replicas import (
    ReplicaRegistry,
    failover_warning,
    home_replica_id,
    shared_owner,
    shared_store_url,
)
from scheduler.store import Store, keys, outbox
from scheduler.store.agents import AgentTokens
from scheduler.store.budgets import BudgetSettings
from scheduler.store.connection import EmbeddedRedis, connect
from scheduler.store.leases import LeasedTask, Leases
from scheduler.timing import (
    AGENT_LOST_AFTER_S,
    BUDGET_WEBHOOK_INTERVAL_S,
    BUDGET_WEBHOOK_LEASE_S,
    EMBEDDED_REDIS_CHECK_S,
    OFFER_POLL_S,
    ORPHAN_SWEEP_LEASE_S,
    ORPHAN_SWEEP_S,
    POLL_LEASE_INTERVALS,
    POLL_LEASE_MIN_S,
    RECONCILE_INTERVAL_S,
    REPLAY_OFFER_POLL_S,
    REPLICA_HEARTBEAT_S,
)

log = logging.getLogger(__name__)

# Credentials a launched agent needs to reach an S3 checkpoint store; passed to the instance
# only, never logged or stored.
_STORE_ENV = ga_secrets.STORE_ENV_NAMES


@dataclass
class DaemonSettings:
    """How to run. Defaults give the embedded setup.

    - **home**: state directory (``GA_HOME``).
    - **providers**: provider entries (see :mod:`scheduler.provider_setup`); default: the
      replayed example market. **config_dir**: folder relative paths in them start from.
    - **host**/**port**: API bind address; port 0 reuses the last port or picks a free one.
    - **redis_url**: ``REDIS_URL``; ``None`` starts the embedded Redis.
    - **store_url**: ``GA_STORE_URL``; default the one the replicas on this Redis use, else a
      local directory under home (see :mod:`scheduler.replicas`).
    - **owner**: ownership tag value on every instance (one per installation, ``GA_OWNER``;
      default the one the replicas on this Redis use, else ``GA_HOME/owner-id``).
    - **advertise_url**: the API URL agents on instances use (``GA_ADVERTISE_URL``); default
      the bind address, right for the replayed market's local instances only.
    - **config_file**: the config file read (its ``budgets`` and ``budget_webhook``); default
      ``GA_HOME/config.yaml`` when it exists.
    - **agent_lost_after_s**: an agent silent this many seconds is presumed lost
      (``GA_AGENT_LOST_AFTER_S``; default :data:`~scheduler.timing.AGENT_LOST_AFTER_S`).
      Raises :class:`~scheduler.daemon_config.ConfigError` unless it is a positive number.
    """

    home: Path = field(default_factory=home_dir)
    providers: list[dict] = field(default_factory=default_entries)
    config_dir: Path = field(default_factory=Path.cwd)
    host: str = "127.0.0.1"
    port: int = 0
    redis_url: str | None = field(default_factory=lambda: os.environ.get("REDIS_URL"))
    store_url: str | None = field(default_factory=lambda: os.environ.get("GA_STORE_URL"))
    owner: str | None = field(default_factory=lambda: os.environ.get("GA_OWNER") or None)
    advertise_url: str | None = field(default_factory=lambda: os.environ.get("GA_ADVERTISE_URL"))
    config_file: Path | None = None
    agent_lost_after_s: float = field(default_factory=lambda: _agent_lost_after_s(os.environ))


def _agent_lost_after_s(env: dict[str, str] | os._Environ) -> float:
    """``GA_AGENT_LOST_AFTER_S`` in seconds (default :data:`AGENT_LOST_AFTER_S`). Raises
    :class:`ConfigError` unless it is a finite number > 0: 0 or less would take every agent
    for lost at once, NaN none ever."""
    text = env.get("GA_AGENT_LOST_AFTER_S")
    if not text:
        return AGENT_LOST_AFTER_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"GA_AGENT_LOST_AFTER_S: got {text!r}; must be a positive number "
                          "of seconds")
    return value


def _pick_port(host: str, preferred: int) -> int:
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, candidate))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


def read_daemon_info(home: Path) -> dict | None:
    try:
        return json.loads((home / "daemon.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class DaemonAlreadyRunning(RuntimeError):
    """Another daemon holds this GA_HOME."""


def _lock_home(home: Path):
    """Hold ``GA_HOME/daemon.lock`` for the process lifetime: two daemons on one home would
    share (and stop) one embedded Redis and fight over daemon.json."""
    handle = open(home / "daemon.lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        info = read_daemon_info(home) or {}
        handle.close()
        raise DaemonAlreadyRunning(
            f"another daemon (pid {info.get('pid', '?')}) is running with GA_HOME={home}; "
            "stop it first or use another --home") from None
    return handle


class Daemon:
    """Wires everything; :meth:`run` blocks until SIGTERM/SIGINT or :meth:`stop`.

    Raises ``DaemonAlreadyRunning`` when another daemon holds the home,
    :class:`~scheduler.daemon_config.ConfigError` for a bad config (providers, budgets, the
    webhook URL, ``GA_AGENT_LOST_AFTER_S``), before anything is started.
    """

    def __init__(self, settings: DaemonSettings) -> None:
        self.settings = settings
        home = settings.home
        home.mkdir(parents=True, exist_ok=True)
        # Checked before anything starts: a bad budget or webhook URL is refused here, not
        # after the embedded Redis and the API are up.
        self._budgets: BudgetConfig = load_budget_config(
            settings.config_file or settings.home / "config.yaml")
        self._lock = _lock_home(home)
        adapters = _configured_providers(settings).adapters()
        self.redis = connect(settings.redis_url, home)
        # Leases are held in the name of this home's replica identity, the same for every
        # process on the home: a restart takes over what its dead process held (below).
        self.store = replace(Store.over(self.redis),
                             leases=Leases(self.redis, replica=home_replica_id(home)))
        self.store.agents.drop_legacy_instance_records()
        _hand_slot_ledgers(adapters, self.redis)
        # Failed provider calls are counted in Redis for /metrics (the same on every replica).
        self.providers = ProviderRegistry(counted(adapters, self.redis))
        # Several replicas on one Redis must use one owner id, one checkpoint store and the
        # same secrets (checked below, against the live replicas).
        store_url = shared_store_url(self.redis, settings.store_url,
                                     (home / "checkpoints").resolve().as_uri())
        self.objects = open_store(store_url)
        previous = read_daemon_info(home) or {}
        self.port = _pick_port(settings.host, settings.port or previous.get("port", 0))
        self.api_url = f"http://{settings.host}:{self.port}"
        agent_secret = ga_secrets.agent_secret(home)
        tokens = AgentTokens(agent_secret)
        self.api_token = ga_secrets.api_token(home)
        # A backstop: no log line shows these, even quoted in an error.
        ga_secrets.redact_logs(self.api_token, agent_secret)
        owner = shared_owner(self.redis, home, settings.owner)
        self.replicas = ReplicaRegistry(self.redis, self.store.leases.member, self.api_url,
                                        self.api_token, agent_secret)
        self.replicas.join()
        self._take_over()
        bootstrap = AgentBootstrap(
            api_url=settings.advertise_url or self.api_url, store_url=store_url, tokens=tokens,
            store_env={k: os.environ[k] for k in _STORE_ENV if k in os.environ},
        )
        # One context for the reconcile loop and the orphan sweep: observing returns a new
        # observation and leaves the context as it is.
        self.ctx = Context(store=self.store, providers=self.providers, bootstrap=bootstrap,
                           owner=owner, agent_lost_after_s=settings.agent_lost_after_s)
        self.app = create_app(self.store, self.objects, tokens, self.api_token)
        # POST /v1/plans decides as placements do: it needs which offers are launchable.
        self.app.state.providers = self.providers
        self.scheduler = BackgroundScheduler(timezone="UTC")
        self._server: uvicorn.Server | None = None
        self._webhook: WebhookDeliverer | None = None
        self._stopped = threading.Event()

    def _take_over(self) -> None:
        """What a starting replica takes from before: drop the latest offers of providers no
        longer configured, take the leases of this replica's previous process, and warn when
        agents could not fail over to this replica."""
        forgotten = self.store.offers.forget_providers_except(
            name for adapter in self.providers.adapters() for name in adapter.provider_names)
        if forgotten:
            log.info("latest offers of providers no longer configured dropped (their price "
                     "history is kept): %s", ", ".join(forgotten))
        # We hold daemon.lock, so an earlier process of this replica is gone: its leases are
        # ours at once (under new fences) instead of after their TTLs.
        taken = self.store.leases.take_over_previous()
        if taken:
            log.info("took over %d lease(s) of this replica's previous process", taken)
        failover = failover_warning(self.replicas.live(), self.replicas.replica_id,
                                    self.api_url, self.settings.advertise_url)
        if failover:
            log.warning(failover)

    def _register_jobs(self) -> None:
        """Every periodic job in one place (max_instances=1: a slow run is skipped, not stacked)."""
        for adapter in self.providers.adapters():
            interval = REPLAY_OFFER_POLL_S if adapter.time_scale > 1 else OFFER_POLL_S
            # One replica polls each provider (the lease's owner); another takes over within
            # the lease's TTL when it dies.
            poller = LeasedTask(self.store.leases, keys.poller_lease(adapter.name),
                                max(POLL_LEASE_MIN_S, POLL_LEASE_INTERVALS * interval),
                                OfferPoller(self.store, adapter))
            # First poll at once but in the background: a cold poll of many cloud regions
            # takes tens of seconds and must not hold up the API.
            self.scheduler.add_job(poller, "interval", seconds=interval, jitter=0.2,
                                   max_instances=1, coalesce=True, id=f"poll:{adapter.name}",
                                   next_run_time=datetime.now(UTC))
        self.scheduler.add_job(reconcile_pass, "interval", args=[self.ctx],
                               seconds=RECONCILE_INTERVAL_S, max_instances=1, coalesce=True,
                               id="reconcile")
        self.scheduler.add_job(LeasedTask(self.store.leases, keys.ORPHAN_SWEEP_LEASE,
                                          ORPHAN_SWEEP_LEASE_S, sweep_orphans, self.ctx),
                               "interval", seconds=ORPHAN_SWEEP_S, max_instances=1,
                               coalesce=True, id="orphans")
        # Side writes of job writes whose writer died after committing (any replica may
        # apply them: each applies once); at start too, for this replica's previous process.
        self.scheduler.add_job(self._repair_job_outboxes, "interval",
                               seconds=outbox.REPAIR_INTERVAL_S, max_instances=1,
                               coalesce=True, id="job-outbox-repair",
                               next_run_time=datetime.now(UTC))
        self.scheduler.add_job(self._replica_heartbeat, "interval", seconds=REPLICA_HEARTBEAT_S,
                               max_instances=1, coalesce=True, id="replica-heartbeat")
        self._register_budgets()
        if self.settings.redis_url is None:
            self.scheduler.add_job(self._keep_embedded_redis, "interval",
                                   seconds=EMBEDDED_REDIS_CHECK_S, max_instances=1,
                                   coalesce=True, id="embedded-redis")

    def _register_budgets(self) -> None:
        """Publish the config's budgets (per-user limits, webhook) to every replica through
        Redis, and deliver webhook alerts from one replica at a time."""
        budgets = self._budgets
        self.store.spend.publish_settings(BudgetSettings(
            users=budgets.budgets, webhook=budgets.budget_webhook is not None))
        if budgets.budget_webhook:
            self._webhook = WebhookDeliverer(self.store.budget_outbox, budgets.budget_webhook)
            self.scheduler.add_job(LeasedTask(self.store.leases, DELIVERY_LEASE,
                                              BUDGET_WEBHOOK_LEASE_S, self._webhook),
                                   "interval", seconds=BUDGET_WEBHOOK_INTERVAL_S,
                                   max_instances=1, coalesce=True, id="budget-webhook")

    def _repair_job_outboxes(self) -> None:
        try:
            outbox.repair(self.store.redis)
        except redis.RedisError as exc:
            log.warning("job outbox repair skipped, Redis unavailable: %s", exc)

    def _replica_heartbeat(self) -> None:
        try:
            self.replicas.heartbeat()
        except redis.RedisError as exc:
            log.warning("replica heartbeat skipped, Redis unavailable: %s", exc)

    def _keep_embedded_redis(self) -> None:
        """Restart the embedded Redis if it died (its AOF keeps the state); the client
        reconnects through the same socket on its next command."""
        server = EmbeddedRedis(self.settings.home / "redis")
        if not server.running():
            log.warning("embedded Redis is not running; restarting it from its AOF")
            try:
                server.start()
            except RuntimeError as exc:
                log.error("%s", exc)

    def run(self) -> None:
        config = uvicorn.Config(self.app, host=self.settings.host, port=self.port,
                                log_level="warning", access_log=False, lifespan="off",
                                # X-Forwarded-For from a local client must not rewrite the
                                # address the audit stream records.
                                proxy_headers=False,
                                # uvicorn's records go through our handlers (text or JSON)
                                log_config=None)
        self._server = uvicorn.Server(config)
        self._server.install_signal_handlers = lambda: None
        api_thread = threading.Thread(target=self._server.run, name="api", daemon=True)
        api_thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self._server.started:
            raise RuntimeError(f"API did not start on {self.api_url}")
        self.ctx.listening_since = datetime.now(UTC)
        self._register_jobs()
        self.scheduler.start()
        info = {"api_url": self.api_url, "port": self.port, "pid": os.getpid(),
                "providers": [a.name for a in self.providers.adapters()]}
        tmp = self.settings.home / "daemon.json.tmp"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, self.settings.home / "daemon.json")
        log.info("gpu-arbiter daemon ready at %s (dashboard: %s/ui/)", self.api_url,
                 self.api_url.rstrip("/"))
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stopped.set())
        self._stopped.wait()
        self.shutdown()

    def stop(self) -> None:
        self._stopped.set()

    def shutdown(self) -> None:
        """Stop pollers, the loop and the API. Instances and their agents keep running; the
        embedded Redis stops (its AOF is on disk) and is restarted by the next daemon."""
        if self._webhook is not None:
            self._webhook.stop()  # a delivery run under way starts no new POST
        self.scheduler.shutdown(wait=True)
        # Other replicas take our jobs and pollers over at once rather than after the TTLs.
        try:
            released = self.store.leases.release_all()
            self.store.leases.inactive(keys.RECONCILERS)
            self.replicas.leave()
            log.info("released %d lease(s)", released)
        except redis.RedisError as exc:
            log.warning("could not release leases (they expire by themselves): %s", exc)
        if self._server is not None:
            self._server.should_exit = True
        for adapter in self.providers.adapters():
            _stop_idle_replay_cloud(adapter)
            adapter.close()
        if self.settings.redis_url is None:
            EmbeddedRedis(self.settings.home / "redis").stop()
        log.info("gpu-arbiter daemon stopped")


def _configured_providers(settings: DaemonSettings) -> ProviderRegistry:
    """The adapters of ``settings.providers``. Raises ``ProviderConfigError`` for a bad
    entry, or two adapters serving one provider name."""
    try:
        return ProviderRegistry(build_providers(settings.providers, settings.config_dir,
                                                settings.home))
    except ValueError as exc:
        if isinstance(exc, ProviderConfigError):
            raise
        raise ProviderConfigError(str(exc)) from None


def _hand_slot_ledgers(adapters: list[Provider], client: redis.Redis) -> None:
    """Fleet adapters claim their hosts' GPUs in the shared Redis, one ledger per name."""
    from providers.fleet import UsesSlotLedger
    from scheduler.store.fleet import FleetLedger

    for adapter in adapters:
        if isinstance(adapter, UsesSlotLedger):
            adapter.use_ledger(FleetLedger(client, adapter.name))


def _stop_idle_replay_cloud(adapter: Provider) -> None:
    """A replayed market's cloud process outlives the daemon only while it runs instances
    (they are someone's jobs); an idle one is stopped with the daemon."""
    if not isinstance(adapter, ReplayProvider):
        return
    try:
        if all(inst.state.is_gone() for inst in adapter.describe()):
            adapter.shutdown_cloud()
    except Exception as exc:  # shutting down: report, never block the exit
        log.warning("could not stop the replay cloud: %s", exc)


"""``ReplayProvider``: a :class:`providers.base.Compute` over a replay cloud process.

It only translates: models ↔ the cloud's JSON, HTTP statuses → :mod:`providers.errors`. The
market itself (offers, traces, clock) runs in the cloud process (:mod:`.cloud`), which this
provider starts on first use and which outlives it.

Routing: a replayed market may imitate several clouds (offers with ``provider: aws`` and
``provider: gcp``). ``provider_names`` is the set of every ``Offer.provider`` this market
serves; the scheduler should route a launch to this provider whenever the offer's provider is
in that set. ``name`` is that single provider name when there is one, else ``"replay"``.

Next to a real source of one of those clouds (its adapter, or a public catalog), the imitation
yields the name (it :class:`~providers.base.Renames`): :meth:`ReplayProvider.avoid_names` lists
the market's ``aws`` offers as ``aws-replay`` (and translates back in launch and describe), so
replayed and real offers, instances and price series never share a name.

Beyond :class:`~providers.base.Compute`, a replayed market offers what only it can: its
``market``, :meth:`ReplayProvider.offers_now` without starting the cloud, and
:meth:`ReplayProvider.shutdown_cloud`; the scheduler asks ``isinstance(adapter,
ReplayProvider)`` for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from core.models import Instance, InstanceState, Offer, OfferKey, PriceObservation, utcnow
from core.models.base import ensure_utc
from providers.base import Compute, LaunchRequest, Renames
from providers.errors import CapacityError, NotFoundError, ProviderError, QuotaError
from providers.replay.client import CloudClient, error_code, running_cloud_url, shutdown_cloud
from providers.replay.market import load_market
from providers.replay.state import DEFAULT_IDLE_EXIT_S, STATE_FILE, CloudStateData

MULTI_PROVIDER_NAME = "replay"
# An instance here is a local process: the agent reports within seconds of the launch. Five
# minutes still covers a restore of a large checkpoint on a machine running many agents (the
# test suites), and replaces an agent that died at start well within a demo.
AGENT_START_TIMEOUT_S = 300.0


def _instance(view: dict[str, Any]) -> Instance:
    # The cloud adds pid, pid_alive, work_dir...; Instance is strict, so keep its own fields.
    return Instance.model_validate({k: view[k] for k in Instance.model_fields if k in view})


class ReplayProvider(Compute, Renames):
    """A replayed spot market, run as a local fake cloud whose instances are local processes.

    - **market_path**: market YAML (see :mod:`providers.replay.schema`); loaded here too, so
      a bad file fails at construction with ``MarketError``.
    - **state_dir**: the cloud's state directory (``state.json``, instance work dirs, logs).
    - **agent_command**: argv started on each launched instance, in its work dir; default
      ``python -m scheduler.agent``. Only used when this provider starts the cloud.
    - **idle_exit_s**: a cloud started by this provider exits after this many idle seconds.

    Attributes: ``name``, ``provider_names`` (see module docstring), ``time_scale`` (market
    seconds per wall second), ``market`` (the loaded :class:`ReplayMarket`).
    Every method may block on local HTTP (10 s timeout) and on starting the cloud (≤ 20 s).
    Thread-safe.
    """

    def __init__(self, market_path: str | Path, state_dir: str | Path,
                 agent_command: Sequence[str] | None = None, *,
                 idle_exit_s: float = DEFAULT_IDLE_EXIT_S) -> None:
        self.market = load_market(market_path)
        # The provider name the scheduler sees for each cloud the market imitates (the
        # market's own name unless avoid_names renamed it), and back.
        self._labels = {n: n for n in self.market.provider_names}
        self._names = dict(self._labels)
        self.name = (next(iter(self.provider_names)) if len(self.provider_names) == 1
                     else MULTI_PROVIDER_NAME)
        self.time_scale = self.market.time_scale
        self.state_dir = Path(state_dir).resolve()
        self._client = CloudClient(self.market.path, self.state_dir, agent_command,
                                   idle_exit_s=idle_exit_s, provider=self.name)

    def avoid_names(self, taken: set[str]) -> dict[str, str]:
        """List the offers of each imitated cloud whose name is in ``taken`` (served by a real
        adapter or catalog, or an earlier market) as ``<name>-replay`` (``-replay-2``, ... if
        taken too). Returns ``{market's name: name shown}`` of those renamed. Call before use."""
        renamed = {}
        for name in sorted(self._labels):
            if name not in taken:
                continue
            label, n = f"{name}-replay", 2
            while label in taken or label in self._labels.values():
                label, n = f"{name}-replay-{n}", n + 1
            self._labels[name] = renamed[name] = label
        self._names = {label: name for name, label in self._labels.items()}
        if len(self.provider_names) == 1:
            self.name = next(iter(self.provider_names))
        return renamed

    @property
    def provider_names(self) -> frozenset[str]:
        """Every ``Offer.provider`` this market serves, under the names shown."""
        return frozenset(self._labels.values())

    @property
    def agent_start_timeout_s(self) -> float:
        """The market file's ``agent_start_timeout_s``, else :data:`AGENT_START_TIMEOUT_S`."""
        return self.market.agent_start_timeout_s or AGENT_START_TIMEOUT_S

    @property
    def renamed(self) -> dict[str, str]:
        """``{imitated cloud: name shown}`` for the names :meth:`avoid_names` changed."""
        return {n: label for n, label in self._labels.items() if label != n}

    def _shown(self, offer: Offer) -> Offer:
        label = self._labels.get(offer.provider, offer.provider)
        return offer if label == offer.provider else offer.model_copy(update={"provider": label})

    def _shown_series(self, series: str) -> str:
        provider, _, rest = series.partition("/")
        return f"{self._labels.get(provider, provider)}/{rest}"

    def _market_key(self, key: OfferKey) -> OfferKey:
        name = self._names.get(key.provider, key.provider)
        return key if name == key.provider else key.model_copy(update={"provider": name})

    def _shown_instance(self, instance: Instance) -> Instance:
        provider = self._labels.get(instance.provider, instance.provider)
        offer = self._labels.get(instance.offer.provider, instance.offer.provider)
        if (provider, offer) == (instance.provider, instance.offer.provider):
            return instance
        return instance.model_copy(update={
            "provider": provider, "offer": instance.offer.model_copy(update={"provider": offer})})

    # ----- Compute ---------------------------------------------------------------------------
    def _list_offers(self) -> list[Offer]:
        """Offers rentable now (``GET /offers``): every on-demand offer, and spot offers whose
        availability trace reads 1 or more at the current market time, priced at that time,
        each with its ``capacity`` left (``None``: unbounded; see
        :mod:`providers.replay.schema`).

        Raises ``TransientError`` when the cloud cannot be reached or started.
        """
        resp = self._ok(self._client.request("GET", "/offers"), "list offers")
        return [self._shown(Offer.model_validate(o)) for o in resp.json()["offers"]]

    def _poll_prices(self, since: datetime | None) -> list[PriceObservation]:
        """Price changes after ``since`` (aware UTC; all since the market's epoch when
        ``None``): one observation per offer at the epoch, then one per spot price step, each
        stamped with the wall time the market clock reached it. Raises ``TransientError``."""
        params = {"since": ensure_utc(since).isoformat()} if since is not None else None
        resp = self._ok(self._client.request("GET", "/prices", params=params), "poll prices")
        out = [PriceObservation.model_validate(o) for o in resp.json()["observations"]]
        return [o if self._shown_series(o.series) == o.series
                else o.model_copy(update={"series": self._shown_series(o.series)}) for o in out]

    def _launch(self, request: LaunchRequest) -> Instance:
        """Launch ``request.offer`` as a local agent process (``POST /instances``).

        Idempotent on ``request.client_token``: a repeat returns the first instance (and
        restarts its agent if the cloud died before starting it). Returns a ``running``
        instance (``pending`` forever for a launch the market's ``boot_failures`` never boots).
        Raises ``CapacityError`` (code ``InsufficientInstanceCapacity``) when the spot offer's
        trace reads 0 now or the offer's capacity is taken, ``ProviderError`` for an unknown offer or a token reused
        for another offer, ``TransientError`` when the cloud is unreachable.
        """
        body = {
            "offer": self._market_key(request.offer.key).model_dump(mode="json"),
            "client_token": request.client_token, "tags": request.tags,
            "agent_env": request.agent_env,
        }
        resp = self._client.request("POST", "/instances", json=body)
        if resp.status_code == 409:
            raise CapacityError(_message(resp), provider=request.offer.provider,
                                code=error_code(resp) or "InsufficientInstanceCapacity")
        return self._shown_instance(_instance(self._ok(resp, "launch").json()))

    def _terminate(self, instance_id: str) -> None:
        """Terminate an instance (``DELETE /instances/<id>``): its agent's process group gets
        SIGTERM, then SIGKILL after 5 s; ``describe`` shows ``shutting-down`` then
        ``terminated``. Quiet for unknown or already terminated ids. Raises ``TransientError``.
        """
        resp = self._client.request("DELETE", f"/instances/{instance_id}")
        if resp.status_code not in (200, 204, 404):
            self._ok(resp, "terminate")

    def _describe(self, tags: dict[str, str] | None) -> list[Instance]:
        """Instances carrying all ``tags`` (all when ``None``), terminated ones for an hour,
        with any preemption notice. Raises ``TransientError``."""
        return [self._shown_instance(_instance(v)) for v in self.describe_raw(tags)]

    def close(self) -> None:
        """Close the HTTP client. The cloud process and its instances keep running."""
        self._client.close()

    # ----- only a replayed market ---------------------------------------------------------
    def describe_raw(self, tags: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Like :meth:`describe` but the cloud's full view: adds ``pid``, ``pid_alive`` (the
        agent process still runs), ``work_dir`` and ``terminated_at``; provider names as the
        market spells them. Raises ``TransientError``."""
        params = [("tag", f"{k}={v}") for k, v in (tags or {}).items()]
        resp = self._ok(self._client.request("GET", "/instances", params=params), "describe")
        return resp.json()["instances"]

    def shutdown_cloud(self, *, reset_market: bool = False) -> None:
        """Stop this market's cloud process and every instance it runs (see
        :func:`providers.replay.client.shutdown_cloud`); quiet when none runs. With
        ``reset_market`` the next start begins a fresh market clock."""
        shutdown_cloud(self.state_dir, reset_market=reset_market)

    def offers_now(self) -> list[Offer]:
        """The offers :meth:`list_offers` would return now, without starting the cloud: asked
        of the cloud when one runs for this state dir, else computed from the market file at
        the market clock of ``state.json`` (at the market's start when no cloud ever ran here,
        as the first cloud's clock starts when it does), capacities net of the instances
        ``state.json`` holds not yet terminated. For planning without a daemon."""
        if running_cloud_url(self.state_dir):
            return self.list_offers()
        now = utcnow()
        try:
            state = CloudStateData.model_validate_json((self.state_dir / STATE_FILE).read_bytes())
        except (OSError, ValueError):
            state = None
        epoch = state.epoch_wall if state is not None else now
        running = Counter(r.offer for r in (state.instances.values() if state else ())
                          if r.state is not InstanceState.TERMINATED)
        market_s = self.market.clock(epoch).market_s(now)
        return [self._shown(o) for o in self.market.offers_at(market_s, now, running)]

    def cloud_url(self) -> str:
        """Base URL of the cloud process, starting it if needed."""
        return self._client.ensure_running()

    def _ok(self, resp: Any, action: str) -> Any:
        if resp.status_code < 300:
            return resp
        code = error_code(resp)
        message = f"replay {action}: HTTP {resp.status_code}: {_message(resp)}"
        if resp.status_code == 404:
            raise NotFoundError(message, provider=self.name, code=code)
        if resp.status_code == 429:
            raise QuotaError(message, provider=self.name, code=code)
        raise ProviderError(message, provider=self.name, code=code)


def _message(resp: Any) -> str:
    try:
        return str(resp.json().get("message", resp.text))
    except (ValueError, AttributeError):
        return resp.text[:300]

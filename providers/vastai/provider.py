"""``VastProvider``: the Vast.ai marketplace as a :class:`providers.base.Compute`.

It composes :mod:`.client` (SDK calls), :mod:`.translate`, :mod:`.bidding` and :mod:`.launch`
(pure). Vast is not made of regions: one search per market and poll covers every host
(country → region, place → zone, see :mod:`.translate`).

- Offers: ``search offers`` of type ``on-demand`` (price ``dph_total``) and ``bid`` (price
  ``min_bid``, ``interruption_notice_s`` 0), at most ``max_offers`` each, filtered by
  reliability, country and verification on Vast's side and by GPU model here (Vast's names
  differ from ours). Searched in pages of :data:`SEARCH_PAGE_ROWS` asks by ask id, so only
  one page of raw rows is held at a time (a truncated market keeps its lowest ask ids).
- Prices: Vast keeps no price history; ``poll_prices`` observes every offer's current price
  (the offers of a poll at most :data:`SEARCH_REUSE_S` old, else a new search).
- Launch: the label ``gpu-arbiter:<client token>`` is looked up first and its instance
  returned. Otherwise the machine's current ask is searched (gone → ``CapacityError``), the
  bid computed (:func:`.bidding.bid_usd_per_hour`; a spot launch is never sent without one:
  refused as ``InvalidLaunchRequest``), the instance created, and the label looked up again.
  Vast has no client token, so two launches of one token that both pass the first look-up
  (two replicas whose lease changed hands mid-launch, or the SDK retrying a create whose
  answer was lost) each create an instance; the second look-up closes that window as far as
  the API allows: every launcher keeps the lowest id with the label and destroys the others.
  Within one adapter, launches are serialised.
- Describe: every instance with a label of ours (others are not ours and are left out); an
  interruptible one that was outbid is stopped by Vast with no notice: reported
  ``terminated`` (``shutting-down`` while still running) with reason ``preempted``. The
  adapter does not re-bid (``change_bid``): a higher bid is a higher price than the offer the
  policy chose, so the controller moves the job from its last periodic checkpoint (and
  destroys the stopped instance, which bills storage until then; one still stopped after
  :data:`OUTBID_DESTROY_AFTER_S` is no job's and describe destroys it). Launched but not yet
  listed → ``pending`` for a while; destroyed → ``terminated`` for an hour
  (:class:`providers.regional_instances.InstanceMemory`).
- Terminate: ``destroy``; an instance already gone is a quiet success.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from core.models import (
    Instance,
    InstanceState,
    Market,
    Offer,
    OfferKey,
    PriceObservation,
    utcnow,
)
from providers.base import Checked, CheckResult, Compute, LaunchRequest
from providers.errors import CapacityError, NotFoundError, ProviderError
from providers.regional_instances import InstanceMemory, has_tags, pending_instance
from providers.vastai import translate
from providers.vastai.bidding import bid_usd_per_hour
from providers.vastai.client import VastClient
from providers.vastai.launch import create_arguments, label_for
from providers.vastai.settings import VastSettings

log = logging.getLogger(__name__)
PROVIDER = translate.PROVIDER
# The search prices this much disk when no launch section says (the SDK's default).
DEFAULT_STORAGE_GIB = 5.0
# poll_prices reuses offers searched at most this long ago: the poller lists offers and polls
# prices back to back every 60 s, so a cycle reuses its own search and never the last one's.
SEARCH_REUSE_S = 30.0
# Asks per search request: a page of raw rows (about 11 KB each as the SDK parses them) is
# all that is held at once, whatever max_offers is.
SEARCH_PAGE_ROWS = 1000
# A launch looks for the machine's current ask among at most this many rows.
ASK_LOOKUP_LIMIT = 20
# An instance outbid (stopped) this long is destroyed by describe: the controller acts on a
# preemption within a reconcile pass, so a stopped instance still there is no job's any more.
OUTBID_DESTROY_AFTER_S = 600.0
# InstanceMemory is made for regions; Vast has one.
_ONE_REGION = "-"
_TYPE_RE = re.compile(r"^m(\d+)\.(\d+)x")


class VastProvider(Compute, Checked):
    """GPU offers, prices and instances on Vast.ai (interruptible bids and on-demand).

    - **settings**: the validated ``kind: vastai`` entry (:class:`VastSettings`).
    - **client**: a :class:`VastClient` to use instead of one built from ``settings``.
    - **clock**: aware-UTC now (default the wall clock).

    Every method may block on the API (the SDK's retries, ``timeout_s`` per request).
    Thread-safe.
    """

    name = PROVIDER
    # A Vast instance pulls its Docker image (CUDA images are several GB on hosts with
    # varying bandwidth) and installs the agent before the first report.
    agent_start_timeout_s = 1800.0

    def __init__(self, settings: VastSettings, *, client: VastClient | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.settings = settings
        self.client = client or VastClient(settings.server_url, retries=settings.retries,
                                           timeout_s=settings.timeout_s)
        self._clock = clock or utcnow
        self._lock = threading.Lock()
        self._launching = threading.Lock()
        self._latest: tuple[datetime, list[Offer]] | None = None
        self.memory = InstanceMemory(self._clock)

    @property
    def requests(self) -> dict[str, int]:
        return self.client.requests.snapshot()

    def close(self) -> None:
        self.client.close()

    # ----- offers and prices ------------------------------------------------------------------
    def _query(self) -> dict[str, Any]:
        query: dict[str, Any] = {"reliability": {"gte": self.settings.min_reliability}}
        if self.settings.countries:
            query["geolocation"] = {"in": list(self.settings.countries)}
        return query

    def _storage_gib(self) -> float:
        launch = self.settings.launch
        return launch.disk_gib if launch is not None else DEFAULT_STORAGE_GIB

    def _search(self, market: Market, query: dict[str, Any], limit: int
                ) -> dict[OfferKey, tuple[Offer, translate.Ask]]:
        """Offers of ``market`` matching ``query``, at most ``limit`` rows, searched in pages
        of :data:`SEARCH_PAGE_ROWS` asks ordered by ask id (each page starts after the last
        id seen), so that only one page of raw rows is held at a time."""
        found: dict[OfferKey, tuple[Offer, translate.Ask]] = {}
        after, seen, skipped = None, 0, 0
        while seen < limit:
            page_query = dict(query) | ({"id": {"gt": after}} if after is not None else {})
            size = min(SEARCH_PAGE_ROWS, limit - seen)
            rows = self.client.search_offers(
                page_query, offer_type="bid" if market is Market.SPOT else "on-demand",
                limit=size, storage_gib=self._storage_gib(),
                verified_only=self.settings.verified_only, order=[["id", "asc"]])
            got, seen = len(rows), seen + len(rows)
            ids = [r["id"] for r in rows if isinstance(r.get("id"), int)]
            skipped += translate.offers_from_rows(rows, market, self._clock(), into=found)[1]
            del rows
            if got < size or not ids:
                break
            after = max(ids)
        if skipped:
            log.warning("vastai %s offers: skipped %d malformed rows", market.value, skipped)
        if seen >= limit == self.settings.max_offers:
            log.warning("vastai %s search returned max_offers (%d) offers, all it asks for: "
                        "the market may have more; raise max_offers or narrow the filters",
                        market.value, limit)
        return found

    def _list_offers(self) -> list[Offer]:
        wanted = set(self.settings.gpu_models)
        offers: list[Offer] = []
        for market in self.settings.markets:
            found = self._search(market, self._query(), self.settings.max_offers)
            offers += [o for o, _ in found.values() if not wanted or o.gpu_model in wanted]
        with self._lock:
            self._latest = (self._clock(), offers)
        return offers

    def _poll_prices(self, since: datetime | None) -> list[PriceObservation]:
        with self._lock:
            latest = self._latest
        now = self._clock()
        offers = (latest[1] if latest and (now - latest[0]).total_seconds() <= SEARCH_REUSE_S
                  else self._list_offers())
        return [o for o in translate.observations(offers) if since is None or o.observed_at > since]

    # ----- launch -----------------------------------------------------------------------------
    def _current_ask(self, offer: Offer) -> translate.Ask:
        """The machine's ask for ``offer`` now; ``CapacityError`` when it has none."""
        match = _TYPE_RE.match(offer.instance_type)
        if match is None:
            raise ProviderError(f"vastai cannot launch {offer.key.series()}: not a Vast "
                                "instance type", provider=PROVIDER, code="InvalidLaunchRequest")
        query = {"machine_id": {"eq": int(match.group(1))},
                 "num_gpus": {"eq": int(match.group(2))}}
        found = self._search(offer.market, query, ASK_LOOKUP_LIMIT).get(offer.key)
        if found is None:
            raise CapacityError(f"vastai {offer.key.series()}: the machine lists no such "
                                f"{offer.market.value} ask now", provider=PROVIDER,
                                code="AskGone")
        return found[1]

    def _create_arguments(self, request: LaunchRequest, ask: translate.Ask) -> dict[str, Any]:
        """The create call's arguments; ``ValueError`` when the bid policy or the job's cap
        refuses the ask."""
        offer, cfg, cap = request.offer, self.settings.launch, request.max_price_usd_per_hour
        assert cfg is not None
        bid = None
        if offer.market is Market.SPOT:
            bid = bid_usd_per_hour(ask.min_bid, ask.dph_total, self.settings.bid, cap)
        elif cap is not None and ask.dph_total > cap:
            raise ValueError(f"the on-demand price {ask.dph_total:.4f} USD/h is above the "
                             f"job's max_price_usd_per_hour ({cap:.4f} USD/h)")
        return create_arguments(offer=offer, ask_id=ask.ask_id, client_token=request.client_token,
                                tags=request.tags, agent_env=request.agent_env, cfg=cfg, bid=bid)

    def _launch(self, request: LaunchRequest) -> Instance:
        offer = request.offer
        if offer.provider != PROVIDER:
            raise ProviderError(f"vastai cannot launch {offer.key.series()}", provider=PROVIDER)
        if self.settings.launch is None:
            raise ProviderError("vastai launch is not configured: add a 'launch' section "
                                "(image, disk_gib…) to the vastai provider entry",
                                provider=PROVIDER, code="LaunchNotConfigured")
        with self._launching:
            instance = self._find_by_token(request.client_token)
            if instance is None:
                ask = self._current_ask(offer)
                try:
                    arguments = self._create_arguments(request, ask)
                except ValueError as exc:
                    raise ProviderError(f"vastai launch of {offer.key.series()}: {exc}",
                                        provider=PROVIDER, code="InvalidLaunchRequest") from None
                created = self.client.create_instance(arguments)
                instance = self._find_by_token(request.client_token) or pending_instance(
                    str(created), request, self._clock(), {})
        self.memory.launched(instance, _ONE_REGION)
        return instance

    def _find_by_token(self, client_token: str) -> Instance | None:
        """The instance labelled with ``client_token`` (the lowest id; any other one is a
        duplicate of a race and is destroyed), else one launched but not listed yet."""
        # "in" as the CLI filters labels (show instances --label).
        rows = self.client.instances({"label": {"in": [label_for(client_token)]}})
        ours = sorted(self._translated(rows), key=lambda i: int(i.id))
        ours = [i for i in ours if i.client_token == client_token]
        for duplicate in ours[1:]:
            log.warning("vastai: instance %s duplicates %s (client token %s): destroying it",
                        duplicate.id, ours[0].id, client_token)
            self._terminate(duplicate.id)
        if ours:
            return ours[0]
        return next(iter(self.memory.unlisted(
            _ONE_REGION, (), lambda i: i.client_token == client_token)), None)

    # ----- describe and terminate -------------------------------------------------------------
    def _translated(self, rows: list[dict[str, Any]]) -> list[Instance]:
        out = []
        for row in rows:
            try:
                instance = translate.instance_from_row(row)
            except ValueError as exc:
                log.warning("vastai describe: skipping an instance: %s", exc)
                continue
            if instance is not None:
                out.append(instance)
        return out

    def _describe(self, tags: dict[str, str] | None) -> list[Instance]:
        ours = self._translated(self.client.instances())
        self.memory.listed(ours, _ONE_REGION)
        self._destroy_long_outbid(ours)
        wanted = has_tags(tags or {})
        return [i for i in ours if wanted(i)] + self.memory.unlisted(
            _ONE_REGION, [i.id for i in ours], wanted)

    def _destroy_long_outbid(self, ours: list[Instance]) -> None:
        """Destroy the instances outbid (stopped) for over :data:`OUTBID_DESTROY_AFTER_S`:
        nothing re-bids them, and a stopped instance bills its disk until destroyed; the
        controller destroys the one of a running job at once, this catches those no job
        claims any more (the orphan sweep leaves instances that are gone alone)."""
        now = self._clock()
        for instance in ours:
            if instance.state is not InstanceState.TERMINATED or not instance.preempted:
                continue
            since = self.memory.flagged_since(instance.id, True)
            if since is not None and (now - since).total_seconds() > OUTBID_DESTROY_AFTER_S:
                log.warning("vastai: instance %s has been outbid since %s; destroying it",
                            instance.id, since.isoformat())
                try:
                    self._terminate(instance.id)
                except ProviderError as exc:
                    log.warning("vastai: destroying outbid instance %s failed: %s",
                                instance.id, exc)

    def _terminate(self, instance_id: str) -> None:
        if not instance_id.isdigit():
            return  # never a Vast instance id, so never existed
        try:
            self.client.destroy_instance(int(instance_id))
        except NotFoundError:
            pass
        self.memory.deleted(instance_id)

    # ----- checks -----------------------------------------------------------------------------
    def check(self) -> list[CheckResult]:
        """The API key's source, then one cheap call each: ``show user`` (its credit),
        ``search offers`` per configured market (one row), ``show instances``. Never raises."""
        source = self.client.credentials_source()
        rows = [CheckResult(PROVIDER, "-", "credentials", source is not None,
                            f"found via {source}" if source else
                            "none: set VAST_API_KEY or run `vastai set api-key`")]
        rows.append(self._row("show user", self._credit))
        for market in self.settings.markets:
            rows.append(self._row(f"search offers ({market.value})", lambda m=market: (
                f"{len(self._search(m, self._query(), 1))} offer(s) for limit 1")))
        rows.append(self._row("show instances", lambda: (
            f"{len(self._translated(self.client.instances()))} instance(s) of ours")))
        return rows

    def _credit(self) -> str:
        credit = self.client.show_user().get("credit")
        if isinstance(credit, (int, float)) and credit <= 0:
            raise ProviderError(f"credit {credit:.2f} USD: launches will be refused",
                                provider=PROVIDER, code="NoCredit")
        return "ok" if credit is None else f"credit {float(credit):.2f} USD"

    def _row(self, check: str, call: Callable[[], str]) -> CheckResult:
        try:
            detail = call()
        except ProviderError as exc:
            return CheckResult(PROVIDER, "-", check, False, f"{type(exc).__name__}: {exc}")
        return CheckResult(PROVIDER, "-", check, True, detail)

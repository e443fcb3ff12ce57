"""What a reconcile step needs: the store, the providers, and how to bootstrap an agent."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from core.models import TAG_OWNER, Instance, Job, utcnow
from core.models.agents import AgentReport
from providers.base import Compute, Provider, Renames
from providers.errors import ProviderError
from scheduler.controller.state import ControllerState
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from scheduler.timing import AGENT_LOST_AFTER_S

log = logging.getLogger(__name__)


class ProviderRegistry:
    """Routes an offer's ``provider`` name to the adapter serving it.

    A replayed market serves several provider names at once (it imitates them), so an adapter
    registers under every name in its ``provider_names``. Only :class:`~providers.base.Compute`
    adapters launch; the others (public catalogs) only list offers.

    A launching adapter that :class:`~providers.base.Renames` its offers (its name was taken
    by another entry) still ends what it launched under its own name before the rename: a
    placement stored then carries that name.
    """

    def __init__(self, providers: Iterable[Provider] = ()) -> None:
        self._by_name: dict[str, Provider] = {}
        self._launched_as: dict[str, Compute] = {}
        self._adapters: list[Provider] = []
        for p in providers:
            self.add(p)

    def add(self, provider: Provider) -> None:
        """Register ``provider``. Raises ``ValueError`` when one of its names is already served
        by another adapter (e.g. a replayed market imitating ``aws`` beside the real one): their
        offers and instances would be mixed up."""
        names = set(provider.provider_names)
        taken = sorted(names & set(self._by_name))
        if taken:
            raise ValueError(f"provider name(s) {', '.join(taken)} served by two adapters")
        self._adapters.append(provider)
        for name in names:
            self._by_name[name] = provider
        if isinstance(provider, Compute) and isinstance(provider, Renames):
            self._launched_as.update(dict.fromkeys(provider.renamed, provider))

    def get(self, name: str) -> Provider:
        """Raises ``KeyError`` naming the provider when none is configured."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no provider configured for {name!r}") from None

    def compute(self, name: str) -> Compute:
        """The adapter that launches for ``name``. Raises ``KeyError`` naming the provider
        when none is configured or the one configured only lists offers."""
        provider = self._by_name.get(name)
        if not isinstance(provider, Compute) and name in self._launched_as:
            return self._launched_as[name]
        provider = self.get(name)
        if not isinstance(provider, Compute):
            raise KeyError(f"provider {name!r} only lists offers ({provider.name} cannot "
                           "launch)")
        return provider

    def adapters(self) -> list[Provider]:
        return list(self._adapters)

    def computes(self) -> list[Compute]:
        """The adapters that launch, describe and terminate instances."""
        return [p for p in self._adapters if isinstance(p, Compute)]


@dataclass
class AgentBootstrap:
    """How launched agents reach the daemon and the checkpoint store.

    ``store_env`` holds the store's credentials for the agent (e.g. AWS_ACCESS_KEY_ID); it goes
    only into the launch request, never into Redis or logs.
    """

    api_url: str
    store_url: str
    tokens: AgentTokens
    store_env: dict[str, str] = field(default_factory=dict)

    def env_for(self, job: Job, attempt: int, rank: int = 0) -> dict[str, str]:
        """The agent environment of ``attempt`` of ``job`` on node ``rank`` (a gang's
        agents also get ``GA_NODE_RANK`` and ``GA_NNODES``)."""
        env = {
            "GA_API_URL": self.api_url,
            "GA_AGENT_TOKEN": self.tokens.issue(job.id, attempt, rank),
            "GA_JOB_ID": job.id,
            "GA_ATTEMPT": str(attempt),
            "GA_STORE_URL": self.store_url,
            "GA_JOB_SPEC": json.dumps(job.spec.model_dump(mode="json")),
            **self.store_env,
        }
        nodes = job.spec.resources.nodes
        if nodes > 1:
            env.update({"GA_NODE_RANK": str(rank), "GA_NNODES": str(nodes)})
        return env


@dataclass
class Observed:
    """Instances as providers describe them, fetched once per reconcile pass."""

    by_id: dict[str, Instance] = field(default_factory=dict)
    failed_providers: set[str] = field(default_factory=set)
    # Agents' latest reports by (job id, attempt, rank), read for a batch of jobs just before
    # their steps (one MGET instead of a GET per agent:
    # :func:`scheduler.controller.gang.prefetch_reports`); a step reads others from the store.
    reports: dict[tuple[str, int, int], AgentReport | None] = field(default_factory=dict)

    def report(self, store: Store, job_id: str, attempt: int,
               rank: int = 0) -> AgentReport | None:
        """The newest report of node ``rank``'s agent (0: a one-node job's) of ``attempt``."""
        key = (job_id, attempt, rank)
        return self.reports[key] if key in self.reports else store.agents.last_report(*key)

    def instance(self, instance_id: str | None) -> Instance | None:
        return self.by_id.get(instance_id) if instance_id else None

    def by_client_token(self, token: str) -> Instance | None:
        return next((i for i in self.by_id.values() if i.client_token == token), None)


@dataclass
class Context:
    """What every step is given: the store, the providers, how agents bootstrap, the
    ownership tag value, the clock, and this pass's observation.

    - **observed**: the instances and agent reports of the current pass (empty until
      :meth:`for_pass`; a pass's copies share it).
    - **state**: the controller's in-process memories (:class:`ControllerState`), shared by
      every copy of this context.
    - **agent_lost_after_s**: an agent silent this long (wall seconds) is presumed lost
      (the daemon's setting, ``GA_AGENT_LOST_AFTER_S``).
    - **listening_since**: when agents could first reach this process's API (``None``:
      always could). An agent's silence before it is this daemon's outage, not the agent's:
      liveness counts from here.
    - **deferred_reviews**: where a batch of steps collects its due price-move reviews
      (each job's context and job), for the reconcile pass to decide them in one policy call
      after the batch (:func:`scheduler.controller.migrating.decide_moves`); ``None``: a
      review is decided at once.
    """

    store: Store
    providers: ProviderRegistry
    bootstrap: AgentBootstrap
    owner: str
    clock: Callable[[], datetime] = utcnow
    observed: Observed = field(default_factory=Observed)
    state: ControllerState = field(default_factory=ControllerState)
    agent_lost_after_s: float = AGENT_LOST_AFTER_S
    listening_since: datetime | None = None
    deferred_reviews: list[tuple[Context, Job]] | None = None

    def observe(self) -> Observed:
        """Describe every instance we own, per launching adapter, into a new
        :class:`Observed` (this context is left as it is). An adapter that fails is
        remembered so that no step concludes "instance gone" from a failed describe."""
        observed = Observed()
        for adapter in self.providers.computes():
            try:
                for inst in adapter.describe({TAG_OWNER: self.owner}):
                    observed.by_id[inst.id] = inst
            except ProviderError as exc:
                log.warning("describe failed for %s: %s", adapter.name, exc)
                observed.failed_providers.update(adapter.provider_names)
        return observed

    def for_pass(self) -> Context:
        """A copy of this context for one reconcile pass: the instances observed now, the
        same store, providers and state."""
        return replace(self, observed=self.observe())

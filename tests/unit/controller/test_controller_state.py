"""The controller's state is explicit: observing leaves the context as it is, a pass's copies
share one ControllerState, only Compute adapters are described and launched on, the agent
silence limit is the context's (the daemon's setting), and no module of the controller keeps
mutable state at module level."""

from __future__ import annotations

import ast
from datetime import datetime
from pathlib import Path

import pytest

from core.models import TAG_OWNER, Offer, PriceObservation
from providers.base import LaunchRequest, Provider
from scheduler.controller.context import Context, ProviderRegistry
from scheduler.controller.policy_inputs import launchable
from scheduler.timing import AGENT_LOST_AFTER_S
from tests.factories.offers import offer
from tests.fakes.compute import FakeClock, FakeCompute

CONTROLLER = Path(__file__).resolve().parents[3] / "scheduler" / "controller"


class _Catalog(Provider):
    """Lists offers, launches nothing (as the public catalogs)."""

    name = "catalog"

    def _list_offers(self) -> list[Offer]:
        return [offer(provider="catalog")]

    def _poll_prices(self, since: datetime | None) -> list[PriceObservation]:
        return []


def _context(*adapters: Provider) -> Context:
    # observe() and for_pass() touch neither the store nor the bootstrap.
    return Context(store=None, providers=ProviderRegistry(adapters), bootstrap=None,
                   owner="o", clock=FakeClock())


def test_observing_returns_a_new_observation_and_leaves_the_context_alone() -> None:
    cloud = FakeCompute([offer(provider="fake")])
    ctx = _context(cloud)
    before = ctx.observed
    cloud.launch(LaunchRequest(offer=cloud.offers[0], client_token="t-1",
                               tags={TAG_OWNER: "o"}, agent_env={}))
    observed = ctx.observe()
    assert ctx.observed is before and before.by_id == {}
    assert [i.client_token for i in observed.by_id.values()] == ["t-1"]
    one, two = ctx.for_pass(), ctx.for_pass()
    assert one.observed is not two.observed and ctx.observed is before
    assert one.state is two.state is ctx.state  # the memories outlive a pass


def test_only_compute_adapters_are_described_and_launched_on() -> None:
    cloud, catalog = FakeCompute([offer(provider="fake")]), _Catalog()
    ctx = _context(cloud, catalog)
    assert ctx.providers.computes() == [cloud]
    assert ctx.providers.compute("fake") is cloud
    with pytest.raises(KeyError, match="'catalog' only lists offers"):
        ctx.providers.compute("catalog")
    with pytest.raises(KeyError, match="no provider configured for 'gone'"):
        ctx.providers.compute("gone")
    assert launchable(ctx.providers, "fake")
    assert not launchable(ctx.providers, "catalog") and not launchable(ctx.providers, "gone")
    assert ctx.observe().failed_providers == set()
    assert cloud.calls_of("describe") == [{TAG_OWNER: "o"}]  # the catalog is not asked


def test_the_agent_silence_limit_is_the_daemons_setting(monkeypatch) -> None:
    from scheduler.daemon import DaemonSettings

    assert _context().agent_lost_after_s == AGENT_LOST_AFTER_S == 60.0
    monkeypatch.setenv("GA_AGENT_LOST_AFTER_S", "6")
    assert DaemonSettings().agent_lost_after_s == 6.0
    monkeypatch.delenv("GA_AGENT_LOST_AFTER_S")
    assert DaemonSettings().agent_lost_after_s == AGENT_LOST_AFTER_S
    monkeypatch.setenv("GA_AGENT_LOST_AFTER_S", "soon")
    with pytest.raises(ValueError):
        DaemonSettings()


def _module_state(path: Path) -> list[str]:
    """Module-level names bound to something mutable: a dict, list or set display or
    comprehension, or a call (other than a logger)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            value = node.value
            mutable = isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp
                                 | ast.ListComp | ast.SetComp)
            if isinstance(value, ast.Call):
                mutable = ast.unparse(value.func) != "logging.getLogger"
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if mutable:
                found += [f"{path.name}: {ast.unparse(t)}" for t in targets]
    return found


def test_no_module_of_the_controller_keeps_mutable_state() -> None:
    modules = sorted(CONTROLLER.glob("*.py"))
    assert len(modules) > 5
    assert [name for m in modules for name in _module_state(m)] == []

"""``/metrics`` against a real Redis: jobs submitted and driven through states, scraped and
parsed with prometheus_client's own parser."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from providers.errors import CapacityError, TransientError
from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.controller.reconcile import reconcile_pass
from core.models import JobState, PlacementEnd
from providers.base import Compute, Provider
from scheduler.observability.providers import counted
from scheduler.poller.offers import OfferPoller
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.factories.offers import offer
from tests.integration.observability.conftest import TOKEN, end, place, submit


def scrape(api) -> dict[str, dict[tuple, float]]:
    """``{sample name: {sorted label items: value}}`` of one scrape."""
    response = api.client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_metrics_need_the_user_token(api):
    assert api.client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert api.client.get("/metrics", headers={"Authorization": ""}).status_code == 401


def test_jobs_by_state_preemptions_migrations_and_money_saved(api):
    drive_five_jobs(api)
    samples = scrape(api)
    jobs = {dict(k)["state"]: v for k, v in samples["ga_jobs"].items()}
    assert jobs == {"pending": 2, "provisioning": 0, "running": 1, "checkpointing": 0,
                    "migrating": 0, "succeeded": 1, "failed": 1, "cancelled": 0, "stopped": 0}
    assert samples["ga_preemptions_total"] == {(("provider", "aws"),): 2}
    assert samples["ga_migrations_total"] == {(("reason", "preemption"),): 1,
                                              (("reason", "price"),): 1,
                                              (("reason", "lost"),): 1}
    # Σ (reference 3.0 − price) × hours: job0 2 h × 2.0 + ≥1 h × 2.5 (running), job1 1 h × 1.0
    # + 1 h × 2.0, job2 1 h × 2.0; job3 has no reference.
    saved = samples["ga_money_saved_usd"][()]
    expected = 4.0 + 2.5 + 1.0 + 2.0 + 2.0
    assert expected - 0.01 < saved < expected + 0.1
    # The same as the jobs' own figures (on-demand reference cost − actual cost).
    own = sum(j.on_demand_cost_usd() - j.cost_usd() for j in api.store.jobs.list(100)
              if j.on_demand_reference_usd_per_hour is not None)
    assert abs(own - saved) < 0.1


def drive_five_jobs(api) -> list[str]:
    """Five jobs: running after a preemption, succeeded after a price move, failed after a
    preemption, pending after a lost instance (no on-demand reference), pending."""
    ids = [submit(api, f"job{i}") for i in range(5)]
    place(api.store, ids[0], 1.0, hours_ago=2)
    end(api.store, ids[0], PlacementEnd.PREEMPTED, JobState.MIGRATING, "preempted")
    place(api.store, ids[0], 0.5, provider="aliyun", hours_ago=1)
    place(api.store, ids[1], 2.0, hours_ago=1)
    end(api.store, ids[1], PlacementEnd.MOVED, JobState.MIGRATING, "cheaper offer")
    place(api.store, ids[1], 1.0, hours_ago=1)
    end(api.store, ids[1], PlacementEnd.SUCCEEDED, JobState.SUCCEEDED, "done")
    place(api.store, ids[2], 1.0, hours_ago=1)
    end(api.store, ids[2], PlacementEnd.PREEMPTED, JobState.FAILED, "gave up")
    place(api.store, ids[3], 1.0, ref=None, hours_ago=1)
    end(api.store, ids[3], PlacementEnd.LOST, JobState.PENDING, "instance lost")
    return ids


FIGURE_KEYS = ("ga:jobs:summary", "ga:jobs:finished", "ga:metrics:finished",
               "ga:metrics:finished-saved-usd", "ga:metrics:preemptions",
               "ga:metrics:migrations", "ga:metrics:backfilled")


def test_figures_are_shared_by_replicas_and_older_jobs_are_counted_once(api, redis_client,
                                                                        tmp_path):
    drive_five_jobs(api)
    before = scrape(api)
    # A second replica's app over the same Redis reports the same totals.
    other = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "o2"),
                       AgentTokens(b"s"), TOKEN)
    second = type(api)(TestClient(other, headers={"Authorization": f"Bearer {TOKEN}"}),
                       api.store, other)
    shared = ("ga_jobs", "ga_preemptions_total", "ga_migrations_total")
    again = scrape(second)
    assert all(before[name] == again[name] for name in shared)
    # Jobs stored before the figures existed (an upgrade) are counted by the next scrape, once.
    redis_client.delete(*FIGURE_KEYS)
    for replica in (second, api, second):
        after = scrape(replica)
        assert all(before[name] == after[name] for name in shared)
        assert abs(before["ga_money_saved_usd"][()] - after["ga_money_saved_usd"][()]) < 0.01
    assert redis_client.hlen("ga:jobs:summary") == 3  # active jobs only
    assert redis_client.hlen("ga:jobs:finished") == 2


class Failing(Compute):
    name = "flaky"
    agent_start_timeout_s = 60.0

    def __init__(self, error: Exception) -> None:
        self.error = error

    def _list_offers(self):
        raise self.error

    def _poll_prices(self, since):
        return []

    def _launch(self, request):
        raise CapacityError("no capacity in flaky-1a")

    def _terminate(self, instance_id):
        pass

    def _describe(self, tags):
        return []


class Ok(Provider):
    name = "okcloud"

    def _list_offers(self):
        return [offer(provider="okcloud")]

    def _poll_prices(self, since):
        return []


def test_provider_errors_and_poll_latency(api, redis_client):
    failing = Failing(TransientError("throttled"))
    assert counted([failing], redis_client) == [failing]  # the adapter itself, not a wrapper
    assert OfferPoller(api.store, failing)() == 0
    assert OfferPoller(api.store, failing)() == 0
    with pytest.raises(CapacityError):
        failing.launch(None)
    OfferPoller(api.store, Ok())()

    samples = scrape(api)
    errors = {tuple(v for _, v in k): n for k, n in samples["ga_provider_errors_total"].items()}
    assert errors == {("TransientError", "list_offers", "flaky"): 2,
                      ("CapacityError", "launch", "flaky"): 1}
    counts = {dict(k)["provider"]: v for k, v in samples["ga_offer_poll_seconds_count"].items()}
    assert counts["flaky"] >= 2 and counts["okcloud"] >= 1


def test_reconcile_pass_duration_is_observed(api):
    from scheduler.controller.context import Context, ProviderRegistry
    before = scrape(api).get("ga_reconcile_pass_seconds_count", {}).get((), 0)
    ctx = Context(store=api.store, providers=ProviderRegistry([]), bootstrap=None, owner="t")
    reconcile_pass(ctx)
    assert scrape(api)["ga_reconcile_pass_seconds_count"][()] == before + 1


def test_rewriting_a_finished_job_does_not_count_it_again(api):
    job_id = submit(api)
    place(api.store, job_id, 1.0)
    end(api.store, job_id, PlacementEnd.SUCCEEDED, JobState.SUCCEEDED, "done")
    first = scrape(api)
    job = api.store.jobs.get(job_id)
    job.record(JobState.SUCCEEDED, "note added later")
    api.store.jobs.save(job)
    second = scrape(api)
    assert second["ga_jobs"] == first["ga_jobs"]
    assert {dict(k)["state"]: v for k, v in second["ga_jobs"].items()}["succeeded"] == 1
    assert abs(second["ga_money_saved_usd"][()] - first["ga_money_saved_usd"][()]) < 1e-9

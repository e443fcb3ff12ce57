"""Prometheus metrics of the daemon, served at ``/metrics`` (:mod:`scheduler.api.metrics`).

Two kinds of figures:

- **Shared by all replicas, read from Redis at scrape time** (:class:`StoreCollector`): jobs
  by state, preemptions, migrations by reason, money saved, cost per 1,000 work units of
  running jobs, waste alerts, provider errors. They are kept in
  Redis beside each job write (:mod:`scheduler.store.job_stats`) and at each failed provider
  call (:mod:`scheduler.store.provider_errors`), so any replica's ``/metrics`` gives the same
  totals; sum nothing across replicas for these.
- **Process-local timings** (:data:`POLL_SECONDS`, :data:`RECONCILE_SECONDS`): histograms of
  this process's offer polls and reconcile passes; aggregate them across replicas in PromQL.

The histograms live in a registry of their own (:data:`PROCESS_REGISTRY`, not
prometheus_client's global one) and each app gets its own :class:`CollectorRegistry` from
:func:`registry_for`, so building many apps in one process (tests) never collides.

Metric names (units in the names, ``_total`` on counters as Prometheus expects):

- ``ga_jobs{state}`` gauge
- ``ga_preemptions_total{provider}`` counter
- ``ga_migrations_total{reason}`` counter (``preemption`` | ``price`` | ``lost``)
- ``ga_money_saved_usd`` gauge: Σ over jobs of (on-demand reference cost − actual cost; the
  actual cost is what the market charged: each held offer's recorded price series
  integrated over its running time, :meth:`core.models.Placement.cost_usd`)
- ``ga_provider_errors_total{provider,operation,error}`` counter
- ``ga_job_cost_per_1k_units_usd{job_id,unit}`` gauge: USD per 1,000 work units of each
  running job whose rate on its offer is measured (its held offer's latest price ÷ that
  rate; at most :data:`~scheduler.store.job_stats.WORK_COST_JOBS_MAX` jobs, by job id, so the
  series stay bounded)
- ``ga_waste_alerts_total{alert}`` counter (``low-utilisation`` | ``idle`` | ``slow-steps``
  | ``vram-oversized``; :mod:`scheduler.controller.waste`)
- ``ga_offer_poll_seconds{provider}`` histogram
- ``ga_reconcile_pass_seconds`` histogram
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import redis
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler.store.job_stats import JobStats
from scheduler.store.provider_errors import ProviderErrors
from scheduler.timing import POLL_LATENCY_BUCKETS_S, RECONCILE_BUCKETS_S

PROCESS_REGISTRY = CollectorRegistry(auto_describe=True)

POLL_SECONDS = Histogram(
    "ga_offer_poll_seconds", "Seconds one offer poll of a provider took (offers and prices), "
    "failed polls included", ["provider"], buckets=POLL_LATENCY_BUCKETS_S,
    registry=PROCESS_REGISTRY)
RECONCILE_SECONDS = Histogram(
    "ga_reconcile_pass_seconds", "Seconds one reconcile pass over the active jobs took",
    buckets=RECONCILE_BUCKETS_S, registry=PROCESS_REGISTRY)

F = TypeVar("F", bound=Callable)


def timed(histogram: Histogram) -> Callable[[F], F]:
    """Decorator: observe each call's wall seconds in ``histogram`` (raising calls too)."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with histogram.time():
                return fn(*args, **kwargs)
        return inner  # type: ignore[return-value]
    return wrap


class StoreCollector(Collector):
    """Builds the Redis-backed metrics at each scrape: a few small HGETALLs, whatever the
    number of jobs (their figures are pre-computed per job write)."""

    def __init__(self, stats: JobStats, errors: ProviderErrors,
                 clock: Callable[[], float] = time.time) -> None:
        self._stats = stats
        self._errors = errors
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        totals = self._stats.totals(self._clock())
        jobs = GaugeMetricFamily("ga_jobs", "Jobs by state", labels=["state"])
        for state, count in totals.by_state.items():
            jobs.add_metric([state], count)
        yield jobs
        yield GaugeMetricFamily(
            "ga_money_saved_usd", "USD saved against running every job on its cheapest eligible "
            "on-demand offer (sum over jobs of reference cost minus actual cost, the held "
            "offers' recorded spot price series integrated over their running time)",
            value=totals.saved_usd)
        work = GaugeMetricFamily(
            "ga_job_cost_per_1k_units_usd", "USD per 1,000 work units (samples, tokens or "
            "steps) of a running job: its held offer's latest price divided by the rate "
            "measured from its own progress reports on that offer", labels=["job_id", "unit"])
        for job_id, unit, usd in totals.work_cost:
            work.add_metric([job_id, unit], usd)
        yield work
        counters = self._stats.counters()
        yield _counter("ga_preemptions", "Placements ended by a spot preemption",
                       ["provider"], {(k,): v for k, v in counters["preemptions"].items()})
        yield _counter("ga_migrations", "Migrations started, by reason (preemption: the spot "
                       "instance was reclaimed; price: a voluntary move to an offer cheaper per "
                       "hour or per unit of work (a faster offer that costs less to finish "
                       "counts here too; its event says how much faster and dearer), or the "
                       "held price rose above the job's max_price_usd_per_hour; lost: the "
                       "instance vanished)", ["reason"],
                       {(k,): v for k, v in counters["migrations"].items()})
        yield _counter("ga_waste_alerts", "GPU waste alerts raised, by alert (low-utilisation: "
                       "under 65 % for 10 min; idle: 0 % for 300 s; slow-steps: step time "
                       "over 20 % above the job's baseline; vram-oversized: under half the "
                       "offer's GPU memory used)", ["alert"],
                       {(k,): v for k, v in counters.get("waste", {}).items()})
        yield _counter("ga_provider_errors", "Provider calls that failed, by provider, "
                       "operation and error type", ["provider", "operation", "error"],
                       self._errors.counts())

    def describe(self) -> list[Metric]:
        return []  # no scrape at registration time (Redis may be down then)


def _counter(name: str, doc: str, labels: list[str],
             values: dict[tuple[str, ...], int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for label_values, value in sorted(values.items()):
        family.add_metric(list(label_values), value)
    return family


class _ProcessMetrics(Collector):
    """This process's histograms, exposed through a per-app registry."""

    def collect(self) -> Iterator[Metric]:
        yield from PROCESS_REGISTRY.collect()


def registry_for(client: redis.Redis) -> CollectorRegistry:
    """A fresh registry serving the shared figures kept in the Redis of ``client`` and this
    process's histograms."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(JobStats(client), ProviderErrors(client)))
    registry.register(_ProcessMetrics())
    return registry

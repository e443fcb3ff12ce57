"""The store integration tests run twice: on one redis-server and on a real 3-master Redis
Cluster (``redis_cluster``, shared by the session), each client made by
:func:`scheduler.store.connection.connect` from the setup's URL where that is the product's
way. The cluster runs are marked ``slow`` (the cluster takes seconds to form), so the fast
tier runs the single-server ones only.

:func:`redis_backends` is the parameter list; :data:`CLUSTER_XFAIL` names the tests that are
known to fail on the cluster and why, in this one place.
"""

from __future__ import annotations

import pytest

from scheduler.store.connection import connect

SINGLE, CLUSTER = "single", "cluster"

# Test function names (``module::name``) that fail on the cluster for a known reason; they
# run there as xfail(strict=False) so a fix shows up as XPASS. Empty when nothing is known.
_JOB_WRITES = ("job writes (scheduler/store/jobs.py) WATCH on a non-transactional cluster "
               "pipeline and span slots (ga:jobs, ga:jobs:active): the per-job outbox fixes it")
_HISTORY = ("price-history appends (scheduler/store/history_scripts.py) pipeline EVALSHA, "
            "which a cluster pipeline refuses")
CLUSTER_XFAIL: dict[str, str] = {
    "test_instance_records.py::test_a_job_run_leaves_no_instance_record": _JOB_WRITES,
    "test_leases.py::test_old_holders_save_is_refused_after_another_replica_took_the_lease":
        _JOB_WRITES,
    "test_leases.py::test_a_lapsed_lease_refuses_saves_and_a_fenced_save_renews_the_lease":
        _JOB_WRITES,
    "test_leases.py::test_reconcile_leaves_a_job_leased_by_another_replica_alone": _JOB_WRITES,
    "test_leases.py::test_two_replicas_split_the_jobs_evenly": _JOB_WRITES,
    "test_replica_restart.py::test_a_restart_on_the_same_home_takes_its_own_leases_over_at_once":
        _JOB_WRITES,
    "test_replica_restart.py::test_replicas_on_other_homes_stay_other_replicas": _JOB_WRITES,
    "test_spend_ledger.py::test_the_ledger_holds_a_finished_jobs_final_cost": _JOB_WRITES,
    "test_spend_ledger.py::test_a_job_that_never_started_adds_nothing": _JOB_WRITES,
    "test_store.py::test_job_create_is_once_and_saves_are_optimistic": _JOB_WRITES,
    "test_store.py::test_terminal_jobs_leave_the_active_set": _JOB_WRITES,
    "test_store.py::test_offers_replace_per_provider_and_history_appends": _HISTORY,
    "test_unconfigured_offers.py::"
    "test_offers_of_providers_no_longer_configured_are_dropped_at_start": _HISTORY,
}


def redis_backends(cluster: bool = True) -> list:
    """The ``redis_client`` parameters: the single server, and the cluster (``slow``)
    unless ``cluster`` is false."""
    params = [pytest.param(SINGLE, id=SINGLE)]
    if cluster:
        params.append(pytest.param(CLUSTER, id=CLUSTER, marks=pytest.mark.slow))
    return params


class ClusterAsServer:
    """What a test takes from ``redis_server`` (its ``url``, a ``client()``), of the cluster."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.url = cluster.url

    def client(self):
        return connect(self.url)


@pytest.fixture(params=redis_backends())
def redis_backend(request) -> str:
    """``single`` or ``cluster``: which Redis this test runs on."""
    if request.param == CLUSTER:
        reason = CLUSTER_XFAIL.get(f"{request.node.path.name}::{request.node.originalname}")
        if reason:
            request.applymarker(pytest.mark.xfail(reason=reason, strict=False))
    return request.param


@pytest.fixture
def redis_server(redis_server, redis_backend, request):
    """The session's redis-server, or the cluster in its place (a daemon a test starts
    with ``redis_server.url`` then runs on the same Redis as ``redis_client``)."""
    if redis_backend == SINGLE:
        return redis_server
    return ClusterAsServer(request.getfixturevalue("redis_cluster"))


@pytest.fixture
def redis_client(redis_server, redis_backend):
    """A client of this test's Redis, flushed (see the module docstring)."""
    if redis_backend == SINGLE:
        client = redis_server.client()
        client.flushall()
        yield client
        return
    redis_server.cluster.flushall()
    client = connect(redis_server.url)
    yield client
    client.close()

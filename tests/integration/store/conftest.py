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
CLUSTER_XFAIL: dict[str, str] = {}


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
    client = connect(redis_server.url)  # redis_cluster flushed it for this test
    yield client
    client.close()

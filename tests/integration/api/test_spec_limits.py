"""Submissions that used to grow the daemon's memory: a 60 MiB ``command`` (accepted, 201; six
took the daemon from 118 MB to 3.5 GB), a spec of a hundred thousand tiny values, bodies
that hold a whole spec's worth of JSON on routes that take no bundle, parallel large
uploads. Each is refused with a 4xx (or a 503 to retry) naming what is over, nothing is
stored, and the largest valid submission still goes through. Real app, real Redis."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import json
import os
import tarfile

import httpx
import pytest
from fastapi.testclient import TestClient

from scheduler.api import limits as body_limits
from scheduler.api.auth import Decision
from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from core.models import limits as L
from scheduler.store import Store
from scheduler.store.agents import AgentTokens

TOKEN = "limits-token"
SPEC = {"name": "train", "command": "python train.py"}


@pytest.fixture
def client(redis_client, tmp_path):
    app = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "objects"),
                     AgentTokens(b"secret"), TOKEN)
    return TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})


def test_a_60_mib_command_is_a_422_naming_it_and_nothing_is_stored(client, redis_client):
    answer = client.post("/v1/jobs", json={"spec": {**SPEC, "command": "x" * (60 * 2**20)}})
    assert answer.status_code == 422, answer.text[:300]
    [problem] = answer.json()["problems"]
    assert problem["field"] == "command" and f"at most {L.COMMAND_MAX_CHARS}" in problem["problem"]
    assert len(answer.content) < 2000  # the value is not echoed back whole
    assert redis_client.keys("ga:job:*") == []


@pytest.mark.parametrize("spec,field", [
    ({**SPEC, "env": {f"V{i}": "x" for i in range(L.ENV_MAX_VARS + 1)}}, "env"),
    ({**SPEC, "env": {"V": "x" * (L.ENV_VALUE_MAX_CHARS + 1)}}, "env"),
    ({**SPEC, "regions": {"deny": ["us-west2"] * (L.LIST_MAX_ITEMS + 1)}}, "regions.deny"),
    ({**SPEC, "resources": {"gpu_models": ["A" * (L.LIST_ITEM_MAX_CHARS + 1)]}},
     "resources.gpu_models"),
    ({**SPEC, "checkpoint": {"dir": "c/" * L.CHECKPOINT_DIR_MAX_CHARS}}, "checkpoint.dir"),
])
def test_each_bounded_field_is_a_422_naming_it(client, redis_client, spec, field):
    answer = client.post("/v1/jobs", json={"spec": spec})
    assert answer.status_code == 422, answer.text[:300]
    assert [p["field"] for p in answer.json()["problems"]] == [field]
    assert redis_client.keys("ga:job:*") == []


def test_a_spec_of_a_hundred_thousand_tiny_values_is_refused_before_it_is_parsed(client,
                                                                                  redis_client):
    env = {f"a{i}": "" for i in range(100_000)}  # ~1.2 MB; at 96 MiB: 1 GiB and 11 s to parse
    answer = client.post("/v1/jobs", json={"spec": {**SPEC, "env": env}})
    assert answer.status_code == 413, answer.text[:300]
    assert answer.json()["detail"].startswith("spec: ")
    assert redis_client.keys("ga:job:*") == []


def test_routes_without_a_bundle_take_a_spec_sized_body(client):
    spec = {**SPEC, "command": "x" * (body_limits.BODY_MAX_BYTES + 1)}
    answer = client.post("/v1/plans", json={"spec": spec})
    assert answer.status_code == 413 and f"over {body_limits.BODY_MAX_BYTES}" in answer.text


def test_a_query_string_over_its_limit_is_a_414(client):
    answer = client.get("/v1/history", params={"gpu": "V" * body_limits.QUERY_MAX_BYTES})
    assert answer.status_code == 414 and "query string" in answer.json()["detail"]
    assert client.get("/v1/history", params={"gpu": "V" * 1000}).status_code == 200


def test_a_huge_value_in_the_wrong_place_is_not_echoed(client):
    answer = client.post("/v1/jobs", json={"spec": "x" * (8 * 2**20)})
    assert answer.status_code == 422 and len(answer.content) < 2000


def _largest_valid_spec() -> dict:
    """Fields at their limits, as much of them as the whole-spec limit allows."""
    spec = {**SPEC, "command": "c" * L.COMMAND_MAX_CHARS,
            "regions": {"allow": ["r" * 100] * 100}, "env": {}}
    i = 0
    while len(json.dumps(spec, separators=(",", ":"))) < L.SPEC_MAX_BYTES - 2_000:
        spec["env"][f"V{i}"] = "v" * 1_000
        i += 1
    return spec


def test_the_largest_valid_submission_fits_the_body_limits(client, redis_client):
    """A spec near its whole-size limit, indented as a person would write it, with a bundle at
    its limit (incompressible data): accepted, so the body limits agree with the spec and
    bundle limits."""
    spec = _largest_valid_spec()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = os.urandom(L.BUNDLE_MAX_BYTES - 200_000)
        info = tarfile.TarInfo("weights.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    bundle = gzip.compress(buf.getvalue(), compresslevel=1)
    assert L.BUNDLE_MAX_BYTES - 300_000 < len(bundle) <= L.BUNDLE_MAX_BYTES
    body = json.dumps({"spec": spec, "bundle_b64": base64.b64encode(bundle).decode()},
                      indent=2).encode()
    answer = client.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 201, answer.text[:300]
    assert len(body) <= body_limits.SUBMIT_BODY_MAX_BYTES


class _AnyoneMayCall:
    """An authenticator that lets every request through: this test is about body budgets."""

    def decide(self, *_):
        return Decision()

    def csrf_ok(self, *_):
        return True


def test_parallel_large_bodies_past_the_buffer_budget_get_a_503_to_retry():
    """Two bodies held at once against a budget for one: the second is told to retry (and is
    not buffered), and once the first is done a third goes through."""
    release = asyncio.Event()
    entered = asyncio.Event()

    async def app(scope, receive, send):
        await receive()
        entered.set()
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = body_limits.BodyLimitMiddleware(app, limit_for=lambda _: 10_000,
                                                 auth=_AnyoneMayCall(),
                                                 buffered_max=body_limits.HANDLING_FACTOR * 6_000)

    async def run():
        transport = httpx.ASGITransport(app=middleware)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            first = asyncio.create_task(http.post("/v1/jobs", content=b"x" * 5_000))
            await entered.wait()
            second = await http.post("/v1/jobs", content=b"x" * 5_000)
            release.set()
            assert (await first).status_code == 200
            third = await http.post("/v1/jobs", content=b"x" * 5_000)
            return second, third

    second, third = asyncio.run(run())
    assert second.status_code == 503 and second.headers["retry-after"] == "2"
    assert "retry" in second.json()["detail"]
    assert third.status_code == 200
    assert middleware.buffered == 0

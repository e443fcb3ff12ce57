"""A gang's agents through the real API app over a real Redis: each rank's report is kept
apart, the roster is answered once every rank gave its address, a stop reaches every rank,
the ranks' output lines share the job's log without colliding, and the job view shows every
node with its state, last heartbeat and cost."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from core.models import JobState, utcnow
from core.models.agents import GangRoster
from core.models.jobs import StopKind, StopRequest
from core.models.placements import GangNode, Placement, node_token
from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.factories.offers import offer

TOKEN = "user-token"
SECRET = b"gang-secret"
SPEC = {"name": "ddp", "command": "torchrun train.py",
        "resources": {"gpu_count": 1, "nodes": 2}}


@pytest.fixture
def api(redis_client, tmp_path):
    store = Store.over(redis_client)
    app = create_app(store, LocalObjectStore(tmp_path / "objects"), AgentTokens(SECRET), TOKEN)
    client = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})
    answer = client.post("/v1/jobs", json={"spec": SPEC})
    assert answer.status_code == 201, answer.text
    return client, store, answer.json()["id"]


def _place(store: Store, job_id: str, attempt: int = 1, launched: int = 2,
           price: float = 0.5) -> Placement:
    """Put the job on a 2-node gang placement of ``attempt`` started an hour ago, its first
    ``launched`` nodes launched."""
    job = store.jobs.get(job_id)
    now = utcnow()
    chosen = offer(price_usd_per_hour=price)
    token = f"{job_id}-{attempt}"
    nodes = [GangNode(rank=r, client_token=node_token(token, r),
                      instance_id=f"i-{attempt}-{r}" if r < launched else None,
                      launched_at=now - timedelta(hours=1) if r < launched else None)
             for r in range(2)]
    job.attempt = attempt
    job.placement = Placement(attempt=attempt, offer=chosen, client_token=token, decided_at=now,
                              instance_id=nodes[0].instance_id if launched == 2 else None,
                              started_at=now - timedelta(hours=1), nodes=nodes)
    job.record(JobState.RUNNING if launched == 2 else JobState.PROVISIONING, "placed",
               offer=chosen)
    store.jobs.save(job)
    return job.placement


def _post(client: TestClient, job_id: str, attempt: int, rank: int, token_attempt: int | None = None,
          token_rank: int | None = None, **fields):
    body = {"job_id": job_id, "attempt": attempt, "phase": "starting",
            "at": utcnow().isoformat(), "rank": rank, **fields}
    token = AgentTokens(SECRET).issue(job_id, token_attempt or attempt,
                                      rank if token_rank is None else token_rank)
    return client.post(f"/v1/agent/i-{attempt}-{rank}/report", json=body,
                       headers={"Authorization": f"Bearer {token}"})


def _report(client: TestClient, job_id: str, attempt: int, rank: int, **fields) -> dict:
    answer = _post(client, job_id, attempt, rank, **fields)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_roster_is_answered_only_once_every_rank_gave_its_address_and_rank_0_its_port(api):
    client, store, job_id = api
    _place(store, job_id)
    first = _report(client, job_id, 1, 1, address="10.0.0.6")
    assert first == {"action": "continue", "reason": None, "gang": None}
    # Rank 0 without its port yet: still no roster.
    assert _report(client, job_id, 1, 0, address="10.0.0.5")["gang"] is None
    answer = _report(client, job_id, 1, 0, address="10.0.0.5", master_port=29500)
    roster = GangRoster.model_validate(answer["gang"])
    assert roster == GangRoster(nnodes=2, master_port=29500, addresses=["10.0.0.5", "10.0.0.6"])
    # Rank 1's next heartbeat gets the same roster; both reports are kept apart.
    assert _report(client, job_id, 1, 1, address="10.0.0.6")["gang"] == answer["gang"]
    assert store.agents.last_report(job_id, 1, 0).address == "10.0.0.5"
    assert store.agents.last_report(job_id, 1, 1).address == "10.0.0.6"
    assert roster.environment(1) == {"NODE_RANK": "1", "NNODES": "2", "MASTER_ADDR": "10.0.0.5",
                                     "MASTER_PORT": "29500", "SCHED_NODES": "10.0.0.5,10.0.0.6"}


def test_a_rank_the_job_has_no_node_of_is_refused_naming_rank(api):
    client, store, job_id = api
    _place(store, job_id)
    answer = _post(client, job_id, 1, 2, address="10.0.0.7", log_lines=["intruder"])
    assert answer.status_code == 422, answer.text
    assert [p["field"] for p in answer.json()["detail"]] == ["rank"]
    assert store.agents.last_report(job_id, 1, 2) is None
    assert store.jobs.logs(job_id) == []


def test_a_stop_request_of_the_attempt_reaches_every_rank(api):
    client, store, job_id = api
    _place(store, job_id)
    for rank in (0, 1):
        _report(client, job_id, 1, rank, address=f"10.0.0.{5 + rank}", master_port=29500)
    job = store.jobs.get(job_id)
    job.stop_request = StopRequest(kind=StopKind.PREEMPTION, attempt=1,
                                   reason="interruption notice on rank 1")
    store.jobs.save(job)
    for rank in (0, 1):
        answer = _report(client, job_id, 1, rank, phase="running", address=f"10.0.0.{5 + rank}")
        assert answer["action"] == "stop"
        assert answer["reason"] == "preemption: interruption notice on rank 1"
        assert answer["gang"] is None


def test_a_cancelled_gang_stops_every_rank(api):
    client, store, job_id = api
    _place(store, job_id)
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert [_report(client, job_id, 1, r)["reason"] for r in (0, 1)] == ["job cancelled"] * 2


def test_both_ranks_output_goes_to_the_log_prefixed_and_numbered_apart(api):
    client, store, job_id = api
    _place(store, job_id)
    _report(client, job_id, 1, 0, log_lines=["r0 a", "r0 b"], log_seq=0)
    _report(client, job_id, 1, 1, log_lines=["r1 a", "r1 b"], log_seq=0)
    # A resent report (its answer lost) adds only what is new, rank by rank.
    _report(client, job_id, 1, 1, log_lines=["r1 a", "r1 b", "r1 c"], log_seq=0)
    _report(client, job_id, 1, 0, log_lines=["r0 c"], log_seq=2)
    # Rank 1 dropped lines 3..4: noted, naming the rank.
    _report(client, job_id, 1, 1, log_lines=["r1 f"], log_seq=5)
    logs = store.jobs.logs(job_id)
    assert logs[:5] == ["r0 a", "r0 b", "[rank 1] r1 a", "[rank 1] r1 b", "[rank 1] r1 c"]
    assert logs[5] == "r0 c"
    assert logs[6].startswith("[gpu-arbiter] 2 output line(s) of attempt 1 rank 1 were dropped")
    assert logs[7:] == ["[rank 1] r1 f"]


def test_a_one_node_jobs_output_keeps_its_line_numbers(api, redis_client):
    client, store, _ = api
    one = client.post("/v1/jobs", json={"spec": {"name": "one", "command": "true"}}).json()["id"]
    job = store.jobs.get(one)
    now = utcnow()
    job.placement = Placement(attempt=1, offer=offer(), client_token=f"{one}-1", decided_at=now,
                              instance_id="i-one", started_at=now)
    job.record(JobState.RUNNING, "running", offer=job.placement.offer)
    store.jobs.save(job)
    _report(client, one, 1, 0, log_lines=["a", "b"], log_seq=0)
    _report(client, one, 1, 0, log_lines=["b", "c"], log_seq=1)
    assert store.jobs.logs(one) == ["a", "b", "c"]
    assert redis_client.get(f"ga:job:{{{one}}}:logseq") in ("1:3", b"1:3")


def test_every_rank_authenticates_with_its_own_token_and_no_other(api):
    client, store, job_id = api
    _place(store, job_id, attempt=2)
    assert _post(client, job_id, 2, 1).status_code == 200
    stale = _post(client, job_id, 2, 1, token_attempt=1)
    assert stale.status_code == 403 and "token not valid" in stale.text
    # One node's token cannot speak for another node, rank 0 (whose final report ends the
    # attempt) least of all.
    for rank, token_rank in ((0, 1), (1, 0)):
        forged = _post(client, job_id, 2, rank, token_rank=token_rank, phase="succeeded",
                       exit_code=0)
        assert forged.status_code == 403 and "rank" in forged.text
    assert store.agents.last_report(job_id, 2, 0) is None
    other = client.post("/v1/jobs", json={"spec": SPEC}).json()["id"]
    body = {"job_id": job_id, "attempt": 2, "phase": "starting", "at": utcnow().isoformat(),
            "rank": 1}
    foreign = client.post("/v1/agent/i-2-1/report", json=body, headers={
        "Authorization": f"Bearer {AgentTokens(SECRET).issue(other, 2)}"})
    assert foreign.status_code == 403
    assert store.agents.last_report(job_id, 2, 1) is not None  # only the valid one landed


def test_the_job_view_shows_every_node_with_its_state_heartbeat_and_cost(api):
    client, store, job_id = api
    _place(store, job_id, launched=1)
    gang = client.get(f"/v1/jobs/{job_id}").json()["derived"]["gang"]
    assert [(n["rank"], n["instance_id"], n["state"], n["last_heartbeat"]) for n in gang["nodes"]] \
        == [(0, "i-1-0", "launched", None), (1, None, "launching", None)]
    assert gang["nodes"][1]["cost_usd"] == 0.0
    assert gang["nodes"][0]["cost_usd"] == pytest.approx(gang["cost_usd"])  # one node billed

    _place(store, job_id)
    before = utcnow()
    _report(client, job_id, 1, 0, phase="running", address="10.0.0.5", master_port=29500)
    _report(client, job_id, 1, 1, phase="restoring", address="10.0.0.6")
    view = client.get(f"/v1/jobs/{job_id}").json()
    gang = view["derived"]["gang"]
    assert gang["attempt"] == 1 and gang["node_count"] == 2 and gang["ended"] is False
    nodes = gang["nodes"]
    assert [(n["rank"], n["instance_id"], n["zone"], n["address"], n["state"]) for n in nodes] \
        == [(0, "i-1-0", "us-west-2a", "10.0.0.5", "running"),
            (1, "i-1-1", "us-west-2a", "10.0.0.6", "restoring")]
    assert all(n["last_heartbeat"] >= before.isoformat() for n in nodes)
    # An hour at $0.5/h on each of two nodes: $0.5 per node, $1 in all, as the placement bills.
    assert gang["cost_usd"] == pytest.approx(1.0, abs=1e-3)
    assert [n["cost_usd"] for n in nodes] == [pytest.approx(gang["cost_usd"] / 2)] * 2
    assert view["derived"]["placement_costs"][-1]["node_count"] == 2
    assert view["derived"]["instance_hours"] == pytest.approx(2.0, abs=1e-3)
    # The list answers the same nodes.
    listed = next(j for j in client.get("/v1/jobs").json() if j["id"] == job_id)
    assert [n["state"] for n in listed["derived"]["gang"]["nodes"]] == ["running", "restoring"]


def test_a_one_node_jobs_view_has_no_gang(api):
    client, _, _ = api
    one = client.post("/v1/jobs", json={"spec": {"name": "one", "command": "true"}}).json()
    assert one["derived"]["gang"] is None


@pytest.mark.parametrize("field", [{"rank": "1"}, {"rank": True}, {"rank": 1.0},
                                   {"address": "-oProxyCommand=x"}, {"master_port": "29500"}])
def test_a_gang_report_is_strict_about_its_rank_address_and_port(api, field):
    client, store, job_id = api
    _place(store, job_id, attempt=1)
    body = {"job_id": job_id, "attempt": 1, "phase": "starting", "at": utcnow().isoformat(),
            "rank": 1, **field}
    answer = client.post("/v1/agent/i-1-1/report", json=body, headers={
        "Authorization": f"Bearer {AgentTokens(SECRET).issue(job_id, 1, 1)}"})
    assert answer.status_code == 422, answer.text
    assert next(iter(field)) in answer.text
    assert store.agents.last_report(job_id, 1, 1) is None

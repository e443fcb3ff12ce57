"""The REAL node agent (``python -m scheduler.agent``) as one node of a gang: several agent
processes of one job attempt against a real HTTP daemon endpoint that answers the gang's roster
once every rank reported an address (as the daemon does, :func:`core.models.agents.roster_of`),
and a real S3 server (SeaweedFS) for the checkpoints."""

from __future__ import annotations

import json
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from core.models import Job, JobState, utcnow
from core.models.agents import AgentPhase, AgentReport, GangRoster, roster_of
from core.models.placements import GangNode, Placement, node_token
from scheduler.agent.gang import LocalNode, free_port, route_address
from scheduler.agent.reporter import Reporter
from scheduler.api.app import create_app
from scheduler.checkpoints import (
    commit_checkpoint,
    list_checkpoints,
    open_store,
    restore_latest,
)
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.factories.jobs import spec as factory_spec
from tests.factories.offers import offer
from tests.fixtures.redis_server import free_port as free_tcp_port
from tests.fixtures.waiting import wait_until
from tests.integration.agent.conftest import agent_env, kill_agents, start_agent
from tests.integration.agent.fakes import (
    AgentProcess,
    FakeDaemon,
    FakeImds,
    _DaemonHandler,
)

SECRET = b"gang-agent-secret"  # the real API's agent token secret
RANK_VARS = ("NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT", "SCHED_NODES")


class _GangHandler(_DaemonHandler):
    def reply(self, code: int, body: str = "", content_type: str = "text/plain") -> None:
        # The base handler records the report, then answers the daemon's command: add the
        # roster the daemon would send, from the latest report of every rank.
        daemon: GangDaemon = self.server_owner
        if code == 200 and content_type == "application/json":
            answer = json.loads(body)
            with daemon.lock:
                latest: dict[int, AgentReport] = {}
                for report in daemon.reports:
                    latest[report["rank"]] = AgentReport.model_validate(
                        {k: v for k, v in report.items() if not k.startswith("_")})
                roster = roster_of([latest.get(r) for r in range(daemon.nnodes)], daemon.nnodes)
            if roster is not None:
                answer["gang"] = roster.model_dump(mode="json")
            body = json.dumps(answer)
        super().reply(code, body, content_type)


class GangDaemon(FakeDaemon):
    """:class:`FakeDaemon` for a gang of ``nnodes``: answers carry ``gang`` once complete."""

    handler = _GangHandler
    nnodes = 2

    def of_rank(self, rank: int) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.reports if r["rank"] == rank]

    def phases_of(self, rank: int) -> list[str]:
        return [r["phase"] for r in self.of_rank(rank)]


@pytest.fixture
def gang_daemon() -> Iterator[GangDaemon]:
    server = GangDaemon()
    yield server
    server.stop()


@pytest.fixture
def launch_node(tmp_path: Path, gang_daemon: GangDaemon) -> Iterator[Callable[..., AgentProcess]]:
    """``launch_node(store_url, job_id, spec, rank, nnodes=2, **env) -> AgentProcess``: the
    agent of node ``rank`` (its own work dir and instance id) with the extra ``env``."""
    started: list[AgentProcess] = []

    def launch(store_url: str, job_id: str, spec: dict[str, Any], rank: int, nnodes: int = 2,
               **extra: str) -> AgentProcess:
        work_dir = tmp_path / f"node-{rank}"
        env = agent_env(work_dir, gang_daemon.base_url, gang_daemon.token, job_id=job_id,
                        attempt=1, instance_id=f"i-{job_id}-n{rank}", store_url=store_url,
                        spec=spec, **{"GA_NODE_RANK": str(rank), "GA_NNODES": str(nnodes),
                                      **extra})
        agent = start_agent(work_dir, env)
        started.append(agent)
        return agent

    yield launch
    kill_agents(started)


def gang_spec(command: str, **env: str) -> dict[str, Any]:
    return {"name": "gang-test", "command": command, "env": env,
            "resources": {"nodes": 2},
            "checkpoint": {"dir": "checkpoints", "sync_interval_s": 1, "grace_s": 5}}


# Prints the rank environment, leaves a file naming its rank in the checkpoint folder and shows
# what was restored there; with STAY=1 it then runs until SIGTERM.
RANK_JOB = ("env | grep -E '^(NODE_RANK|NNODES|MASTER_ADDR|MASTER_PORT|SCHED_NODES)=' | sort; "
            "echo resumed=$SCHED_RESUME restored=$(cat $SCHED_CHECKPOINT_DIR/seed.txt); "
            "echo $NODE_RANK > $SCHED_CHECKPOINT_DIR/rank-$NODE_RANK.txt; "
            "if [ \"$STAY\" = 1 ]; then trap 'echo stopped; exit 0' TERM; "
            "while :; do sleep 0.1; done; fi")


def rank_env(output: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in output.splitlines() if "=" in line)
    return {k: v for k, v in pairs if k in RANK_VARS}


def seed_checkpoint(store_url: str, job_id: str, tmp_path: Path) -> str:
    src = tmp_path / "seed"
    src.mkdir()
    (src / "seed.txt").write_text("epoch-3")
    manifest = commit_checkpoint(open_store(store_url), job_id, src, attempt=0)
    assert manifest is not None
    return manifest.checkpoint_id


def test_two_nodes_get_the_roster_the_rank_environment_and_only_rank_0_commits(
    s3_store_url: str, launch_node, gang_daemon: GangDaemon, tmp_path: Path
) -> None:
    seeded = seed_checkpoint(s3_store_url, "job-gang", tmp_path)
    # The spec's own NODE_RANK loses to the gang's.
    spec = gang_spec(RANK_JOB, NODE_RANK="7")
    first = launch_node(s3_store_url, "job-gang", spec, rank=0)
    gang_daemon.wait_for(lambda: len([r for r in gang_daemon.of_rank(0) if r["address"]]) >= 3)
    assert not (first.work_dir / "job.log").exists(), "rank 0 started before rank 1 was ready"
    ready = gang_daemon.of_rank(0)[-1]
    assert ready["phase"] == "restoring" and ready["restored_from"] == seeded
    assert ready["address"] == "127.0.0.1" and ready["master_port"]

    second = launch_node(s3_store_url, "job-gang", spec, rank=1)
    assert first.wait(30) == 0, first.log()
    assert second.wait(30) == 0, second.log()

    port = str(ready["master_port"])
    for rank, agent in ((0, first), (1, second)):
        output = agent.job_output()
        assert rank_env(output) == {"NODE_RANK": str(rank), "NNODES": "2",
                                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                                    "SCHED_NODES": "127.0.0.1,127.0.0.1"}, output
        assert "resumed=1 restored=epoch-3" in output  # every rank restored the checkpoint
        assert "the job spec's env sets NODE_RANK" in agent.log()
        phases = gang_daemon.phases_of(rank)
        assert phases[:2] == ["starting", "restoring"] and phases[-1] == "succeeded", phases
        assert all(r["rank"] == rank for r in gang_daemon.of_rank(rank))
    assert gang_daemon.of_rank(1)[1]["address"] is None  # no address before it is ready
    assert all(r["master_port"] is None for r in gang_daemon.of_rank(1))
    assert all(r["checkpoint_id"] is None for r in gang_daemon.of_rank(1))

    store = open_store(s3_store_url)
    final = gang_daemon.of_rank(0)[-1]
    assert final["checkpoint_id"] == list_checkpoints(store, "job-gang")[0].checkpoint_id
    restored = tmp_path / "restored"
    restore_latest(store, "job-gang", restored)
    assert sorted(p.name for p in restored.iterdir()) == ["rank-0.txt", "seed.txt"]


def test_a_stop_reaches_both_running_nodes_and_only_rank_0_commits(
    s3_store_url: str, launch_node, gang_daemon: GangDaemon, tmp_path: Path
) -> None:
    spec = gang_spec(RANK_JOB, STAY="1")
    nodes = [launch_node(s3_store_url, "job-gang-stop", spec, rank=r,
                         GA_NODE_ADDRESS="localhost", **({"GA_MASTER_PORT": "29500"} if r == 0
                                                         else {}))
             for r in (0, 1)]
    gang_daemon.wait_for(lambda: all("running" in gang_daemon.phases_of(r) for r in (0, 1)), 30)
    for node in nodes:
        node.wait_for_output("resumed=0")
    with gang_daemon.lock:
        gang_daemon.command = {"action": "stop", "reason": "migrating"}
    for node in nodes:
        assert node.wait(30) == 0, node.log()
        assert "stopped" in node.job_output()
        assert rank_env(node.job_output())["MASTER_ADDR"] == "localhost"
        assert rank_env(node.job_output())["MASTER_PORT"] == "29500"
    head, other = gang_daemon.of_rank(0)[-1], gang_daemon.of_rank(1)[-1]
    assert head["phase"] == other["phase"] == "checkpointed"
    assert other["checkpoint_id"] is None
    store = open_store(s3_store_url)
    assert head["checkpoint_id"] == list_checkpoints(store, "job-gang-stop")[0].checkpoint_id
    restored = tmp_path / "restored"
    restore_latest(store, "job-gang-stop", restored)
    assert sorted(p.name for p in restored.iterdir()) == ["rank-0.txt"]


def test_a_stop_while_waiting_for_the_other_nodes_ends_without_running_the_command(
    s3_store_url: str, launch_node, gang_daemon: GangDaemon
) -> None:
    waiting = launch_node(s3_store_url, "job-gang-wait", gang_spec(RANK_JOB), rank=0)
    gang_daemon.wait_for(lambda: any(r["address"] for r in gang_daemon.of_rank(0)))
    with gang_daemon.lock:
        gang_daemon.command = {"action": "stop", "reason": "gang incomplete"}
    assert waiting.wait(15) == 0, waiting.log()
    final = gang_daemon.of_rank(0)[-1]
    assert final["phase"] == "checkpointed" and final["checkpoint_id"] is None
    assert "gang incomplete" in final["message"]
    assert not (waiting.work_dir / "job.log").exists()
    assert list_checkpoints(open_store(s3_store_url), "job-gang-wait") == []


def test_sigterm_while_waiting_ends_without_running_the_command(
    s3_store_url: str, launch_node, gang_daemon: GangDaemon
) -> None:
    waiting = launch_node(s3_store_url, "job-gang-term", gang_spec(RANK_JOB), rank=1)
    gang_daemon.wait_for(lambda: any(r["address"] for r in gang_daemon.of_rank(1)))
    waiting.popen.send_signal(signal.SIGTERM)
    assert waiting.wait(15) == 0, waiting.log()
    final = gang_daemon.of_rank(1)[-1]
    assert final["phase"] == "checkpointed" and "SIGTERM" in final["message"]
    assert not (waiting.work_dir / "job.log").exists()


@pytest.mark.parametrize("env, problem", [
    ({"GA_NODE_RANK": "2"}, "GA_NODE_RANK must be below GA_NNODES (2), got 2"),
    ({"GA_NODE_RANK": "-1"}, "GA_NODE_RANK must be an integer 0..63"),
    ({"GA_NODE_ADDRESS": "10.0.0.1; rm -rf /"}, "GA_NODE_ADDRESS must be an IPv4/IPv6 address"),
    ({"GA_MASTER_PORT": "70000"}, "GA_MASTER_PORT must be an integer 1..65535"),
    ({"GA_NNODES": "3"}, "GA_NNODES is 3 but the job spec asks for 2 nodes"),
])
def test_bad_gang_settings_stop_the_agent_before_it_reports(
    s3_store_url: str, launch_node, gang_daemon: GangDaemon, env: dict[str, str], problem: str
) -> None:
    agent = launch_node(s3_store_url, "job-gang-bad", gang_spec(RANK_JOB), rank=0, **env)
    assert agent.wait(15) == 2
    assert problem in agent.log()
    assert gang_daemon.phases() == []


def test_the_reporter_keeps_the_first_roster_and_puts_rank_and_address_in_every_report() -> None:
    bodies: list[dict[str, Any]] = []
    roster = {"nnodes": 2, "master_port": 29500, "addresses": ["10.0.0.1", "10.0.0.2"]}
    answers = [{"action": "continue"}, {"action": "continue", "gang": roster},
               {"action": "continue"}]

    def daemon(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=answers[min(len(bodies), len(answers)) - 1])

    reporter = Reporter("http://daemon.test", "t", "i-1", "job-1", 1, rank=1,
                        transport=httpx.MockTransport(daemon))
    reporter.send(AgentPhase.RESTORING)
    assert reporter.roster is None
    reporter.set_node(address="10.0.0.2")
    reporter.send(AgentPhase.RESTORING)
    reporter.send(AgentPhase.RESTORING)
    assert reporter.roster is not None and reporter.roster.environment(1)["NODE_RANK"] == "1"
    assert [b["rank"] for b in bodies] == [1, 1, 1]
    assert [b["address"] for b in bodies] == [None, "10.0.0.2", "10.0.0.2"]


def test_the_node_address_is_the_source_of_the_route_to_the_daemon() -> None:
    assert route_address("http://no-such-host.invalid:1,http://127.0.0.1:8740") == "127.0.0.1"
    with pytest.raises(OSError, match="set GA_NODE_ADDRESS"):
        route_address("http://no-such-host.invalid:8740")
    port = free_port("127.0.0.1")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))  # released: the job's rendezvous can bind it


def test_a_roster_of_another_size_is_refused() -> None:
    node = LocalNode.find(1, 3, "http://127.0.0.1:8740")
    assert node.master_port is None and node.report_fields() == {"address": "127.0.0.1"}
    roster = GangRoster(nnodes=2, master_port=29500, addresses=["10.0.0.1", "10.0.0.2"])
    assert "this node is one of 3" in (node.check(roster) or "")


class _Api:
    """The daemon's real API app (uvicorn, in a thread) over the test's real Redis."""

    def __init__(self, store: Store, objects: Path) -> None:
        app = create_app(store, LocalObjectStore(objects), AgentTokens(SECRET), "api-token")
        self.url = f"http://127.0.0.1:{free_tcp_port()}"
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1",
                                                     port=int(self.url.rsplit(":", 1)[1]),
                                                     log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        wait_until(lambda: self._server.started, 10, "the API to start")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)



def _gang_job(store: Store, command: str) -> Job:
    """A 2-node job RUNNING on attempt 1, its nodes i-1-0 and i-1-1 launched."""
    now = utcnow()
    job = Job(id="gang-real-0001", spec=factory_spec(name="ddp", command=command, resources={"nodes": 2}),
              created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted", at=now)
    job = store.jobs.create(job)
    token = f"{job.id}-1"
    nodes = [GangNode(rank=r, client_token=node_token(token, r), instance_id=f"i-1-{r}",
                      launched_at=now) for r in range(2)]
    job.attempt = 1
    job.placement = Placement(attempt=1, offer=offer(), client_token=token, decided_at=now,
                              instance_id="i-1-0", started_at=now, nodes=nodes)
    job.record(JobState.RUNNING, "running", offer=job.placement.offer)
    return store.jobs.save(job)


def test_two_agents_rendezvous_through_the_real_api(redis_client, tmp_path: Path) -> None:
    store = Store.over(redis_client)
    job = _gang_job(store, "env | grep -E '^(NODE_RANK|MASTER_PORT)=' | sort")
    api = _Api(store, tmp_path / "objects")
    agents: list[AgentProcess] = []
    try:
        for rank in (0, 1):
            work_dir = tmp_path / f"node-{rank}"
            env = agent_env(work_dir, api.url, AgentTokens(SECRET).issue(job.id, 1, rank),
                            job_id=job.id, attempt=1, instance_id=f"i-1-{rank}",
                            store_url=(tmp_path / "ckpt").as_uri(),
                            spec=job.spec.model_dump_json(), GA_NODE_RANK=str(rank),
                            GA_NNODES="2")
            agents.append(start_agent(work_dir, env))
        for agent in agents:
            assert agent.wait(60) == 0, agent.log()
    finally:
        kill_agents(agents)
        api.stop()
    head, other = (store.agents.last_report(job.id, 1, r) for r in (0, 1))
    assert head is not None and other is not None
    assert head.phase is other.phase is AgentPhase.SUCCEEDED
    assert head.checkpoint_id is None and other.checkpoint_id is None  # nothing to commit
    port = head.master_port
    assert port is not None and other.address == head.address == "127.0.0.1"
    logs = store.jobs.logs(job.id)
    assert sorted(logs) == sorted([f"MASTER_PORT={port}", "NODE_RANK=0",
                                   f"[rank 1] MASTER_PORT={port}", "[rank 1] NODE_RANK=1"]), logs


def test_a_notice_while_waiting_for_the_other_nodes_ends_without_running_the_command(
    s3_store_url: str, launch_node, gang_daemon: GangDaemon, fake_imds: FakeImds
) -> None:
    waiting = launch_node(s3_store_url, "job-gang-notice", gang_spec(RANK_JOB), rank=1,
                          GA_METADATA_FLAVOR="aws", GA_METADATA_URL=fake_imds.base_url)
    gang_daemon.wait_for(lambda: any(r["address"] for r in gang_daemon.of_rank(1)))
    fake_imds.set_notice("terminate")
    assert waiting.wait(15) == 0, waiting.log()
    final = gang_daemon.of_rank(1)[-1]
    assert final["phase"] == "checkpointed" and final["notice"]["action"] == "terminate"
    assert not (waiting.work_dir / "job.log").exists()

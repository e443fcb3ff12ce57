"""``schedctl status`` of a gang: a table of its nodes (rank, instance, zone, address, state,
last heartbeat, cost per node) and the gang's cost in all, read from the real API over a
real Redis after the nodes' agents reported through it; a one-node job prints no node table.
The dashboard's job page shows the same nodes."""

from __future__ import annotations

from datetime import timedelta

import httpx
from typer.testing import CliRunner

from core.models import JobState, utcnow
from core.models.agents import AgentPhase, AgentReport
from core.models.placements import GangNode, Placement, node_token
from scheduler.api.auth import SESSION_COOKIE
from scheduler.cli.main import app as cli
from tests.factories.offers import offer
from tests.integration.cli.conftest import TOKEN, new_job

# $0.0036/h: an hour of one node costs $0.0036, so the four decimals shown stay put for the
# seconds the test takes.
PRICE = 0.0036


def _place_gang(store, job, instance_ids: list[str | None]) -> None:
    now = utcnow()
    chosen = offer(zone="us-west-2b", price_usd_per_hour=PRICE)
    token = f"{job.id}-1"
    nodes = [GangNode(rank=r, client_token=node_token(token, r), instance_id=i,
                      launched_at=now - timedelta(hours=1) if i else None)
             for r, i in enumerate(instance_ids)]
    job.attempt = 1
    job.placement = Placement(attempt=1, offer=chosen, client_token=token, decided_at=now,
                              instance_id=instance_ids[0] if all(instance_ids) else None,
                              started_at=now - timedelta(hours=1), nodes=nodes)
    job.record(JobState.RUNNING, "running on every node", offer=chosen)
    store.jobs.save(job)


def _report(served, job_id: str, rank: int, phase: AgentPhase, **fields) -> None:
    report = AgentReport(job_id=job_id, attempt=1, phase=phase, at=utcnow(), rank=rank, **fields)
    answer = httpx.post(f"{served.url}/v1/agent/i-{rank}/report", content=report.model_dump_json(),
                        headers={"Authorization": f"Bearer {served.tokens.issue(job_id, 1, rank)}",
                                 "Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text


def _status(served, job_id: str) -> str:
    result = CliRunner().invoke(cli, ["status", job_id, "--home", str(served.home)],
                                env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    return result.output


def _row(out: str, first: str) -> list[str]:
    """The cells of the node table's line starting with ``first`` (the panel's borders
    dropped)."""
    table = out[out.index("nodes of attempt"):]
    rows = ([cell for cell in line.split() if cell != "│"] for line in table.splitlines())
    return next(row for row in rows if row[:1] == [first])


def test_status_of_a_gang_lists_every_node_and_the_cost_per_node_and_in_all(served):
    job = new_job(served.store, "ddp", resources={"gpu_count": 1, "nodes": 2})
    _place_gang(served.store, job, ["i-gang-a", "i-gang-b"])
    _report(served, job.id, 0, AgentPhase.RUNNING, address="10.0.0.5", master_port=29500)
    _report(served, job.id, 1, AgentPhase.RESTORING, address="10.0.0.6")
    out = _status(served, job.id)
    assert "nodes of attempt 1" in out
    head = _row(out, "rank")
    assert head[:6] == ["rank", "instance", "zone", "address", "state", "last"]
    rank0, rank1 = _row(out, "0"), _row(out, "1")
    assert rank0[1:5] == ["i-gang-a", "us-west-2b", "10.0.0.5", "running"]
    assert rank1[1:5] == ["i-gang-b", "us-west-2b", "10.0.0.6", "restoring"]
    assert rank0[-1] == rank1[-1] == "$0.0036"  # an hour of one node each
    assert "s ago)" in " ".join(rank0)
    assert "gang of 2 nodes: $0.0072 in all" in out
    assert "2.00 instance-hours" in out  # both nodes' hours
    assert "×2" in out  # the placement is a gang's


def test_a_node_not_launched_yet_is_launching_and_has_cost_nothing(served):
    job = new_job(served.store, "ddp", resources={"gpu_count": 1, "nodes": 2})
    _place_gang(served.store, job, ["i-gang-a", None])
    out = _status(served, job.id)
    assert _row(out, "0")[1:5] == ["i-gang-a", "us-west-2b", "-", "launched"]
    assert _row(out, "1")[1:] == ["-", "us-west-2b", "-", "launching", "-", "$0.0000"]
    assert "gang of 2 nodes: $0.0036 in all" in out


def test_status_of_a_one_node_job_prints_no_node_table(served):
    job = new_job(served.store)
    now = utcnow()
    job.placement = Placement(attempt=1, offer=offer(price_usd_per_hour=PRICE),
                              client_token=f"{job.id}-1", decided_at=now, instance_id="i-one",
                              started_at=now - timedelta(hours=1))
    job.record(JobState.RUNNING, "running", offer=job.placement.offer)
    served.store.jobs.save(job)
    out = _status(served, job.id)
    assert "nodes of attempt" not in out and "gang of" not in out and "×" not in out
    assert "1.00 instance-hours" in out


def test_the_job_page_shows_the_gangs_nodes_escaped(served):
    job = new_job(served.store, "ddp", resources={"gpu_count": 1, "nodes": 2})
    _place_gang(served.store, job, ["i-<b>a</b>", "i-gang-b"])
    _report(served, job.id, 0, AgentPhase.RUNNING, address="10.0.0.5", master_port=29500)
    page = httpx.get(f"{served.url}/ui/jobs/{job.id}", cookies={SESSION_COOKIE: TOKEN})
    assert page.status_code == 200, page.text
    html = page.text
    assert 'id="job-nodes"' in html
    assert "i-&lt;b&gt;a&lt;/b&gt;" in html and "i-<b>a</b>" not in html
    assert "10.0.0.5" in html and "i-gang-b" in html and "launched" in html
    assert 'data-field="gang-cost">$0.0072<' in html
    assert html.count("$0.0036") >= 2  # each node's share

"""A job whose command exited non-zero: ``schedctl status`` shows the exit code and the last
lines of its log. The agent's reports go through the real API, the real reconcile loop fails
the job on a real replay cloud (stand-in agents that only sleep), and the CLI reads the API."""

from __future__ import annotations

import httpx
from typer.testing import CliRunner

from scheduler.cli.main import app as cli
from scheduler.controller.reconcile import reconcile_pass
from core.models import JobState, utcnow
from core.models.agents import AgentPhase, AgentReport
from core.models.jobs import FAILURE_LOG_LINE_CHARS, FAILURE_LOG_LINES
from tests.integration.cli.conftest import new_job
from tests.integration.controller.conftest import controller_context, replay_market  # noqa: F401

MARKET = """
name: failing
time_scale: 60
notice_seconds: 2
offers:
  - {provider: aws, region: r1, zone: r1b, instance_type: steady, gpu_model: T4, gpu_count: 1,
     vram_gib: 16, vcpus: 4, memory_gib: 16, on_demand_price_usd_per_hour: 0.5,
     spot_price_usd_per_hour: 0.2}
"""


def _report(served, job_id: str, instance_id: str, phase: AgentPhase, lines: list[str],
            exit_code: int | None = None) -> None:
    report = AgentReport(job_id=job_id, attempt=1, phase=phase, at=utcnow(), exit_code=exit_code,
                         log_lines=lines)
    response = httpx.post(f"{served.url}/v1/agent/{instance_id}/report",
                          content=report.model_dump_json(),
                          headers={"Authorization": f"Bearer {served.tokens.issue(job_id, 1)}",
                                   "Content-Type": "application/json"})
    assert response.status_code == 200, response.text


def test_status_of_a_failed_job_shows_the_exit_code_and_the_last_log_lines(
        served, redis_client, replay_market):  # noqa: F811
    provider = replay_market(MARKET)
    ctx = controller_context(redis_client, provider)
    ctx.store.offers.replace_offers("aws", provider.list_offers())
    job = new_job(ctx.store, max_failures=0)
    reconcile_pass(ctx)
    instance_id = ctx.store.jobs.get(job.id).placement.instance_id
    _report(served, job.id, instance_id, AgentPhase.RUNNING,
            [f"step {i}" for i in range(30)] + ["x" * 1000])
    reconcile_pass(ctx)
    assert ctx.store.jobs.get(job.id).state is JobState.RUNNING
    _report(served, job.id, instance_id, AgentPhase.FAILED,
            ["Traceback (most recent call last):", "ValueError: loss is nan"], exit_code=3)
    reconcile_pass(ctx)
    failed = ctx.store.jobs.get(job.id)
    assert failed.state is JobState.FAILED

    # Bounded: the last lines only, each cut.
    tail = failed.command_failure.log_tail
    assert failed.command_failure.exit_code == 3 and len(tail) == FAILURE_LOG_LINES
    assert tail[-2:] == ["Traceback (most recent call last):", "ValueError: loss is nan"]
    assert tail[-3] == "x" * (FAILURE_LOG_LINE_CHARS - 1) + "…" and tail[0] == "step 13"

    result = CliRunner().invoke(cli, ["status", job.id, "--home", str(served.home)],
                                env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "attempt 1: the command exited with code 3" in out
    assert f"last 20 lines of its log (all of it: schedctl logs {job.id})" in out
    assert "ValueError: loss is nan" in out and "step 13" in out and "step 12" not in out
    assert "failed (exit 3)" in out  # the placement's end


def test_a_death_by_signal_is_named():
    from scheduler.cli.render import exit_code_meaning
    assert exit_code_meaning(137) == "137 (killed by SIGKILL)"
    assert exit_code_meaning(1) == "1" and exit_code_meaning(255) == "255"

"""``schedctl plan job.yaml``: where the daemon would place a job now, what it will cost and
how long it will take (:mod:`scheduler.services.plans`).

With a daemon answering for ``GA_HOME``, the plan is the daemon's (``POST /v1/plans``, on its
latest offers). Without one, the command plans by itself, so a job can be priced before any
daemon runs: it reads Redis (``REDIS_URL``, else the embedded Redis of ``GA_HOME``, stopped
again on exit) for price history and observed preemptions, and decides on what the configured
providers list now (:mod:`scheduler.services.configured_market`; a replayed market is read
from its file without starting it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from scheduler.cli import render
from scheduler.cli.app import HomeOption, app, client, fail
from scheduler.cli.bundle import load_spec_file
from scheduler.cli.client import CliError
from scheduler.cli.formats import check_format, emit
from scheduler.cli.local_state import direct_store

UNIT_OPTIONS = ("samples", "tokens", "steps")


def work_option(samples: float | None, tokens: float | None, steps: float | None,
                epochs: float | None, compute_hours: float | None) -> dict[str, Any] | None:
    """The ``work`` of a plan request (``{"unit", "amount", "epochs"}``) from the options, or
    ``None`` without a unit option. Raises :class:`CliError` for two unit options, one with
    ``--compute-hours``, and ``--epochs`` alone."""
    given = [(unit, v) for unit, v in zip(UNIT_OPTIONS, (samples, tokens, steps), strict=True)
             if v is not None]
    if len(given) > 1:
        raise CliError("give the work in one unit: " + " and ".join(
            f"--{unit}" for unit, _ in given) + " were both given")
    if not given:
        if epochs is not None:
            raise CliError("--epochs multiplies the work: give it with --samples, --tokens "
                           "or --steps")
        return None
    if compute_hours is not None:
        raise CliError(f"--{given[0][0]} and --compute-hours both set the work to plan for: "
                       "give one (the work's hours come from the spec's work.throughput)")
    unit, amount = given[0]
    return {"unit": unit, "amount": amount, "epochs": 1.0 if epochs is None else epochs}


def option_terms(message: str, work: dict[str, Any] | None) -> str:
    """A plan refusal (the service's or the daemon's, which name the request's fields) in the
    command's terms: a leading ``like_job:`` becomes ``--like:``, ``work.unit:`` and
    ``work.amount:`` the unit option given (``--tokens:``), ``work.epochs:`` ``--epochs:``,
    ``compute_hours`` ``--compute-hours``; ``like_job`` and ``compute_hours`` in the text too."""
    unit = f"--{work['unit']}" if work is not None else "the work"
    fields = {"like_job": "--like", "work.unit": unit, "work.amount": unit,
              "work.epochs": "--epochs", "compute_hours": "--compute-hours"}
    field, sep, rest = message.partition(": ")
    if sep and field in fields:
        message = f"{fields[field]}: {rest}"
    return re.sub(r"\b(like_job|compute_hours)\b", lambda m: fields[m.group(1)], message)


@app.command()
def plan(spec_file: Path = typer.Argument(..., help="job spec YAML"),
         compute_hours: float | None = typer.Option(
             None, "--compute-hours", min=0.001, help="instance-hours the job needs without "
                                                     "interruptions (default: the spec's "
                                                     "expected_hours, else 1: per compute hour)"),
         samples: float | None = typer.Option(
             None, "--samples", min=1, help="plan for this many samples per epoch (e.g. 1e8), "
                                            "at the rates of the spec's work.throughput"),
         tokens: float | None = typer.Option(None, "--tokens", min=1,
                                             help="plan for this many tokens per epoch"),
         steps: float | None = typer.Option(None, "--steps", min=1,
                                            help="plan for this many steps per epoch"),
         epochs: float | None = typer.Option(
             None, "--epochs", min=0.001, help="epochs over the --samples/--tokens/--steps "
                                               "(default 1): the work is their product"),
         like: str | None = typer.Option(
             None, "--like", metavar="JOB", help="plan with the throughput JOB measured from "
                                                 "its progress reports (its unit and total "
                                                 "too, unless given)"),
         lookback: str = typer.Option("30d", help="price history used for the quantiles"),
         config: Path | None = typer.Option(
             None, help="without a running daemon: the daemon config whose providers to plan on "
                        "(default: GA_HOME/config.yaml if present, else the replayed example "
                        "market)"),
         fmt: str = typer.Option("table", "--format", help="table or json"),
         home: Path | None = HomeOption) -> None:
    """Where the daemon would place a job now and why (the same policy and cost model), and
    what it will cost and how long it will take: all on-demand, on spot, under the policy; the
    five best offers, each with its hours and cost to finish, its cost per 1,000 units and
    where its throughput comes from (measured, declared, prior). Flags expected costs over
    the spec's budget_usd.

    The work to plan for: --samples/--tokens/--steps N (× --epochs), or --compute-hours,
    else the spec's work.total, else its expected_hours. GPU-hours = data × epochs ÷
    per-GPU throughput (the spec's work.throughput, units/s on one GPU of a model, or what
    the job --like JOB measured; other models from the package's GPU table).

    Asks the daemon when one answers for GA_HOME (its latest offers). Without one it plans by
    itself on what the configured providers list now (--config), reading price history from
    Redis (REDIS_URL, else GA_HOME's embedded Redis, stopped again on exit)."""
    from scheduler.daemon_config import ConfigError
    from scheduler.services.jobs import SpecError

    check_format(fmt)
    work = None
    try:
        work = work_option(samples, tokens, steps, epochs, compute_hours)
        raw = load_spec_file(spec_file)
        result = _daemon_plan(home, raw, compute_hours, lookback, work, like)
        if result is None:
            result = _plan_here(home, raw, compute_hours, lookback, config, work, like)
    except ConfigError as exc:
        fail(CliError(str(exc)))
    except SpecError as exc:
        fail(CliError(str(exc), exc.problems))
    except CliError as exc:
        fail(CliError(option_terms(str(exc), work), exc.problems))
    emit(result["best_offers"], fmt, result, lambda: render.plan_panel(result))


def _daemon_plan(home: Path | None, raw: dict[str, Any], compute_hours: float | None,
                 lookback: str, work: dict[str, Any] | None, like: str | None
                 ) -> dict[str, Any] | None:
    """The daemon's plan, or ``None`` when no daemon answers for ``home``. Raises
    :class:`CliError` when the daemon refuses the request."""
    try:
        api = client(home)
        api.get("/v1/health")
    except CliError:
        return None
    body = {"spec": raw, "compute_hours": compute_hours, "lookback": lookback}
    if work is not None:
        body["work"] = work
    if like is not None:
        body["like_job"] = like
    try:
        return api.post("/v1/plans", json=body)
    except CliError as exc:
        if like is not None and str(exc) == f"no job {like!r}":  # the daemon's 404
            raise CliError(f"like_job: no job {like!r}") from None
        raise


def _plan_here(home: Path | None, raw: dict[str, Any], compute_hours: float | None,
               lookback: str, config: Path | None, work: dict[str, Any] | None,
               like: str | None) -> dict[str, Any]:
    """The plan made in this process (no daemon), on the configured providers' offers."""
    from core.config import home_dir
    from core.models.work import WorkUnit
    from scheduler.services.history import QueryError
    from scheduler.services.jobs import JobNotFound
    from scheduler.services.plans import PlanError, WorkOption, plan_without_daemon

    option = None if work is None else WorkOption(WorkUnit(work["unit"]), work["amount"],
                                                  work["epochs"])
    try:
        return plan_without_daemon(direct_store(home), home or home_dir(), raw, compute_hours,
                                   lookback, config, option, like)
    except (QueryError, PlanError) as exc:
        raise CliError(str(exc)) from None
    except JobNotFound:
        raise CliError(f"like_job: no job {like!r}") from None

"""Cost of one daemon decision per job, without Redis: what a
reconcile step adds per running job (migration review) and per pending job (placement).

    python3 -m benchmarks.policies.daemon_step [--offers 200] [--samples 288]

Prints milliseconds per job for: building a market view (done once per pass per distinct
eligibility row, cached), and the per-job part (eligibility row, job view, decision call),
the decision calls also for a job with a deadline (its lookahead table cached, as after the
first decision on its model) and the solve of one lookahead table.
Results: benchmarks/policies/RESULTS-daemon.md.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

import numpy as np

from core.models import Job, Offer, Placement
from core.units import RESTART_OVERHEAD_H
from policies import lookahead
from policies.daemon_views import job_view, market_view
from policies.decisions import decide_placement, should_migrate
from policies.eligibility import eligible_matrix
from policies.views import JobView, OfferTable
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer


def _offers(n: int) -> list[Offer]:
    spot = [offer(zone=f"us-west-2{'abc'[i % 3]}", instance_type=f"t{i}",
                  price_usd_per_hour=0.5 + i * 0.01) for i in range(n * 3 // 4)]
    return spot + [o.model_copy(update={"market": "on-demand", "interruption_risk": 0.0})
                   for o in spot[: n - len(spot)]]


def _ms(fn, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--offers", type=int, default=200)
    parser.add_argument("--samples", type=int, default=288)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    offers = _offers(args.offers)
    table = OfferTable.from_offers(offers)
    prices = np.array([o.price_usd_per_hour for o in offers])
    gone = np.zeros(len(offers), bool)
    rng = np.random.default_rng(0)
    samples = rng.random((len(offers), args.samples)) > 0.05
    job = Job(id="j", spec=spec(expected_hours=10), created_at=T0, updated_at=T0)
    job.placement = Placement(attempt=1, offer=offers[5], client_token="t", decided_at=T0,
                              instance_id="i", started_at=T0)
    now = T0 + timedelta(hours=2)
    eligible = eligible_matrix([job.spec], table, prices, gone)
    tb, mk = market_view(offers, eligible, samples, 1 / 60)

    def view():
        return job_view([job], tb, now, restart_overhead_h=RESTART_OVERHEAD_H,
                        decision_interval_h=0.01,
                        compute_h=[10.0], remaining_compute_h=[8.0], time_scale=1.0)

    jv = view()
    timed = JobView(**{**jv.__dict__, "time_to_deadline_h": np.array([20.0])})
    should_migrate(timed, mk), decide_placement(timed, mk)       # solves (and caches) its tables
    model = lookahead.model_for(1 / 6, 1.0, 0.5, 1 / 3, RESTART_OVERHEAD_H)
    rows = {
        "offer table (once per pass)": _ms(lambda: OfferTable.from_offers(offers), args.repeat),
        "market view (once per pass and eligibility row)":
            _ms(lambda: market_view(offers, eligible, samples, 1 / 60), args.repeat),
        "eligibility row (per job)":
            _ms(lambda: eligible_matrix([job.spec], table, prices, gone), args.repeat),
        "job view (per job)": _ms(view, args.repeat),
        "should_migrate (per running job)": _ms(lambda: should_migrate(jv, mk), args.repeat),
        "decide_placement (per pending job)": _ms(lambda: decide_placement(jv, mk), args.repeat),
        "should_migrate, deadline job (table cached)":
            _ms(lambda: should_migrate(timed, mk), args.repeat),
        "decide_placement, deadline job (table cached)":
            _ms(lambda: decide_placement(timed, mk), args.repeat),
        "lookahead table (once per distinct model)":
            _ms(lambda: lookahead.table.__wrapped__(model), 5),
    }
    print(f"{len(offers)} offers, {args.samples} availability samples each")
    for name, ms in rows.items():
        print(f"{ms:8.3f} ms  {name}")


if __name__ == "__main__":
    main()

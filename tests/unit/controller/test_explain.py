"""The numbers a decision's event gives (worked out by hand)."""

import numpy as np

from policies.throughput import RateEstimates
from scheduler.controller.explain import compare, cost_text, gpu_name
from scheduler.controller.policy_inputs import JobSpeeds
from tests.factories.offers import offer

OFFERS = [offer(gpu_model="RTX4090", price_usd_per_hour=0.40),
          offer(gpu_model="T4", gpu_count=2, price_usd_per_hour=0.158)]
PRICES = np.array([0.40, 0.158])


def _speeds(rates, unit, ref_rate=1.0, source=("prior", "prior")) -> JobSpeeds:
    rates = np.asarray(rates, dtype=float)
    return JobSpeeds(speed=rates / ref_rate, rates=RateEstimates(rates, source, np.zeros(2)),
                     ref_rate=ref_rate, unit=unit)


def test_in_reference_hours_before_the_jobs_units_are_known():
    speeds = _speeds([0.74, 0.1506], None)
    # $0.40 / 0.74 = $0.54 and $0.158 / 0.1506 = $1.05 per reference-hour;
    # 0.74 / 0.1506 = 4.9x the speed at 0.40 / 0.158 = 2.5x the price
    assert compare(speeds, OFFERS, PRICES, 0, 1) == (
        "RTX4090: $0.54 per reference-hour vs 2x T4 $1.05: 4.9× faster at 2.5× the price "
        "(rates: prior, prior)")
    assert cost_text(speeds, 1, 0.158) == "$1.05 per reference-hour"


def test_in_the_jobs_units_once_measured_or_declared():
    # 100,000 and 20,000 samples per hour: $0.0040 and $0.0079 per 1,000 samples
    speeds = _speeds([100_000, 20_000], "samples", ref_rate=135_000,
                     source=("measured", "prior"))
    assert compare(speeds, OFFERS, PRICES, 0, 1) == (
        "RTX4090: $0.0040 per 1k samples vs 2x T4 $0.0079: 5× faster at 2.5× the price "
        "(rates: measured, prior)")
    assert cost_text(speeds, 0, 0.40) == "$0.0040 per 1k samples"
    assert gpu_name(OFFERS[1]) == "2x T4" and gpu_name(OFFERS[0]) == "RTX4090"

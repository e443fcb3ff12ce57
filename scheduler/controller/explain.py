"""Why a decision chose an offer, with the numbers of the job's speed model: cost per 1,000
work units (or per reference-hour of work, before the job's units are known), and how much
faster and dearer the chosen offer is than the one it is compared with
(:func:`policies.throughput.compare_text`)."""

from __future__ import annotations

import numpy as np

from core.models import Offer
from core.units import usd_small
from policies.throughput import compare_text, cost_per_1k
from scheduler.controller.policy_inputs import JobSpeeds


def gpu_name(offer: Offer) -> str:
    """``RTX4090``, ``2x A100-80GB``: the offer's GPUs as events name them."""
    return offer.gpu_model if offer.gpu_count == 1 else f"{offer.gpu_count}x {offer.gpu_model}"


def cost_text(speeds: JobSpeeds, i: int, price_usd_per_hour: float) -> str:
    """Cost of work on offer ``i`` at ``price_usd_per_hour``: ``$0.42 per 1k samples``, or
    ``$2.45 per reference-hour`` when the job's rate in its units is unknown."""
    rate = float(speeds.rates.units_per_h[i])
    if speeds.unit is not None:
        return f"{usd_small(cost_per_1k(price_usd_per_hour, rate))} per 1k {speeds.unit}"
    return f"{usd_small(price_usd_per_hour / float(speeds.speed[i]))} per reference-hour"


def compare(speeds: JobSpeeds, offers: list[Offer], prices: np.ndarray, a: int, b: int) -> str:
    """Offer ``a`` against offer ``b`` (indices into ``offers`` and the speeds' columns; prices
    USD/h), e.g. ``RTX4090: $0.42 per 1k samples vs V100 $1.10: 1.6× faster at 0.33× the
    price (rates: measured, prior)``."""
    rates = speeds.rates.units_per_h
    pa, pb = float(prices[a]), float(prices[b])
    ra, rb = float(rates[a]), float(rates[b])
    sources = f" (rates: {speeds.rates.source[a]}, {speeds.rates.source[b]})"
    if speeds.unit is not None:
        return compare_text(gpu_name(offers[a]), cost_per_1k(pa, ra), ra, pa,
                            gpu_name(offers[b]), cost_per_1k(pb, rb), rb, pb,
                            speeds.unit) + sources
    # Rates in reference-hours per hour: the same line, per reference-hour of work.
    per_ref = [p / float(speeds.speed[i]) for p, i in ((pa, a), (pb, b))]
    line = compare_text(gpu_name(offers[a]), per_ref[0] * 1000, ra, pa,
                        gpu_name(offers[b]), per_ref[1] * 1000, rb, pb, "reference-hours")
    pace = line.split(": ", 2)[2] if line.count(": ") >= 2 else ""
    text = (f"{gpu_name(offers[a])}: {usd_small(per_ref[0])} per reference-hour vs "
            f"{gpu_name(offers[b])} {usd_small(per_ref[1])}")
    return (f"{text}: {pace}" if pace else text) + sources

"""A steady in-process market for the load benchmark: ``offers`` offers whose prices move every
second, and one running instance per seeded job. Registered as provider kind ``bench``.

It stands in for a cloud only where no cloud can be reached: every replica builds its own copy
and they agree because everything is derived from the job numbers and the wall clock. The prices
wobble by ±2 % around fixed levels, so the cheapest offer never changes and the steady state is
"every job keeps running": what is measured is the cost of watching 1,000 jobs, not of moving
them.
"""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    Instance,
    InstanceState,
    Market,
    Offer,
    OfferKey,
    PriceObservation,
)
from providers.base import Compute, LaunchRequest
from scheduler.controller.transitions import client_token
from scheduler.provider_setup import FACTORIES

NAME = "bench"
T0 = datetime(2026, 11, 30, tzinfo=UTC)
GPUS = [("T4", 16, 0.53), ("A10G", 24, 1.01), ("L4", 24, 0.81), ("V100", 16, 3.06),
        ("A100", 40, 4.10)]


def job_id(n: int) -> str:
    return f"bench-{n:05d}"


def instance_id(n: int) -> str:
    return f"i-bench{n:05d}"


def offer_keys(count: int) -> list[tuple[OfferKey, str, int, float]]:
    """``count`` (key, gpu model, VRAM GiB, on-demand $/h), spot and on-demand alternating."""
    out = []
    for i in range(count):
        gpu, vram, on_demand = GPUS[i // 2 % len(GPUS)]
        zone = f"us-bench-{i // (2 * len(GPUS)) % 10 + 1}a"
        market = Market.SPOT if i % 2 == 0 else Market.ON_DEMAND
        key = OfferKey(provider=NAME, region=zone[:-1], zone=zone,
                       instance_type=f"{gpu.lower()}.x{i // (2 * len(GPUS)) // 10 + 1}",
                       market=market)
        out.append((key, gpu, vram, on_demand))
    return out


class SteadyMarket(Compute):
    """A :class:`providers.base.Compute` for ``jobs`` seeded jobs and ``offers``
    offers (prices change every wall-clock second)."""

    name = NAME
    # Above 1, the daemon polls it like a replayed market: every REPLAY_OFFER_POLL_S (2 s) rather
    # than a cloud's minute. Nothing else reads it here (the seeded placements keep 1.0).
    time_scale = 2.0
    agent_start_timeout_s = 300.0  # nothing boots: the seeded agents report at once

    def __init__(self, jobs: int, offers: int, owner: str) -> None:
        self._keys = offer_keys(offers)
        self._owner = owner
        self._jobs = jobs
        self._lock = threading.Lock()
        self._terminated: set[str] = set()

    def _price(self, i: int, on_demand: float, second: int, spot: bool) -> float:
        level = on_demand * (0.3 + 0.01 * (i % 7)) if spot else on_demand
        return round(level * (1 + 0.02 * math.sin(second / 7 + i)), 4)

    def _list_offers(self) -> list[Offer]:
        second = int(time.time())
        now = datetime.now(UTC)
        return [Offer(**key.model_dump(), gpu_model=gpu, gpu_count=1, vram_gib=vram, vcpus=8,
                      memory_gib=32, observed_at=now, on_demand_price_usd_per_hour=od,
                      interruption_risk=0.05 if key.market is Market.SPOT else 0.0,
                      price_usd_per_hour=self._price(i, od, second, key.market is Market.SPOT))
                for i, (key, gpu, vram, od) in enumerate(self._keys)]

    def _poll_prices(self, since: datetime | None) -> list[PriceObservation]:
        return [PriceObservation(series=o.key.series(), price_usd_per_hour=o.price_usd_per_hour,
                                 observed_at=o.observed_at)
                for o in self._list_offers() if o.market is Market.SPOT]

    def seeded_instance(self, n: int) -> Instance:
        key = self._keys[0][0]
        state = (InstanceState.TERMINATED if instance_id(n) in self._terminated
                 else InstanceState.RUNNING)
        return Instance(id=instance_id(n), provider=NAME, offer=key,
                        client_token=client_token(job_id(n), 1), state=state, launched_at=T0,
                        tags={TAG_OWNER: self._owner, TAG_JOB: job_id(n), TAG_ATTEMPT: "1"})

    def _launch(self, request: LaunchRequest) -> Instance:
        return Instance(id=f"i-{request.client_token}", provider=NAME, offer=request.offer.key,
                        client_token=request.client_token, state=InstanceState.PENDING,
                        launched_at=datetime.now(UTC), tags=request.tags)

    def _terminate(self, instance_id: str) -> None:
        with self._lock:
            self._terminated.add(instance_id)

    def _describe(self, tags: dict[str, str] | None) -> list[Instance]:
        found = [self.seeded_instance(n) for n in range(self._jobs)]
        return [i for i in found if all(i.tags.get(k) == v for k, v in (tags or {}).items())]



def _factory(entry: dict[str, Any], base: Path, home: Path) -> SteadyMarket:
    return SteadyMarket(int(entry["jobs"]), int(entry["offers"]), str(entry["owner"]))


FACTORIES[NAME] = _factory

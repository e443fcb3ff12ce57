"""Slots: offers from a host's free GPUs, and instance types/ids back to hosts. Pure."""

from __future__ import annotations

import re
from datetime import datetime

from core.models import Market, Offer
from providers.fleet.gpus import HostGpu
from providers.fleet.settings import HostSettings

_SLOT_TYPE_RE = re.compile(r"^([A-Za-z0-9_-]+)\.(\d+)x([A-Za-z0-9-]+)\Z")


def slot_type(host: str, count: int, model: str) -> str:
    """``<host>.<count>x<model>``, e.g. ``box1.2xRTX4090``: a slot's instance type."""
    return f"{host}.{count}x{model}"


def parse_slot_type(instance_type: str) -> tuple[str, int, str]:
    """``(host, GPU count, model)`` of a slot type; raises ``ValueError`` for another shape."""
    match = _SLOT_TYPE_RE.match(instance_type)
    if not match or int(match.group(2)) < 1:
        raise ValueError(f"instance type {instance_type!r} is not a fleet slot "
                         "(<host>.<count>x<gpu model>)")
    return match.group(1), int(match.group(2)), match.group(3)


def instance_id(host: str, client_token: str) -> str:
    """``<host>.<client_token>``: the host is the part before the first ``.``."""
    return f"{host}.{client_token}"


def host_of(instance_id: str) -> str:
    return instance_id.partition(".")[0]


def free_indices(gpus: list[HostGpu], taken: set[int], model: str) -> list[int]:
    """Indices of ``model`` GPUs neither ``taken`` (claimed, or held by a live instance) nor
    busy with a foreign process, lowest first."""
    return sorted(g.index for g in gpus
                  if g.model == model and not g.foreign and g.index not in taken)


def slot_offers(provider: str, host: HostSettings, gpus: list[HostGpu], taken: set[int],
                vcpus: int, memory_gib: float, at: datetime) -> list[Offer]:
    """One on-demand offer per GPU model of the host and slot size ``1 .. free GPUs`` of it,
    priced at ``host.cost_per_gpu_hour_usd`` × GPUs; ``vcpus``/``memory_gib`` are the host's
    totals, shared in proportion to GPUs. ``[]`` when nothing is free."""
    offers = []
    for model in sorted({g.model for g in gpus}):
        free = free_indices(gpus, taken, model)
        vram = next(g.vram_gib for g in gpus if g.model == model)
        for count in range(1, len(free) + 1):
            share = count / len(gpus)
            price = host.cost_per_gpu_hour_usd * count
            offers.append(Offer(
                provider=provider, region=host.site, zone=host.rack,
                instance_type=slot_type(host.name, count, model), market=Market.ON_DEMAND,
                gpu_model=model, gpu_count=count, vram_gib=vram,
                vcpus=max(1, int(vcpus * share)), memory_gib=round(memory_gib * share, 1),
                price_usd_per_hour=price, on_demand_price_usd_per_hour=price,
                interruption_risk=0.0, interruption_notice_s=None, observed_at=at))
    return offers

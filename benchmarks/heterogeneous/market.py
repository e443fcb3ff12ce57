"""The heterogeneous market of the benchmark, built at run time from the shared data folder.

Offers (prices USD/h, as the catalogs give them; nothing is copied into the project):

- **AWS**, SkyPilot's catalog (``catalogs/aws_skypilot_v7_gpu/vms_gpu_rows_partial.csv``),
  region us-west-2, zones ``usw2-az1`` and ``usw2-az2``, on-demand and spot: g4dn.xlarge (T4),
  g5.xlarge (A10G), g6.xlarge (L4), p3.2xlarge (V100), p4d.24xlarge (8× A100-40GB, sold whole).
  Only these two zones: the availability traces below exist for two zones of us-west-2.
- **Vast.ai**, the 2026-05-20 snapshot (``catalogs/anycloud_2026-05-20/vast/vms.csv``),
  on-demand only: the snapshot has no interruptible (bid) prices (``SpotPrice`` 0.00), and a
  Vast on-demand rental is not reclaimed. Two selections (:data:`VAST_SELECTIONS`):

  - ``consumer`` (the issue's market, "the Vast consumer GPUs"): the rows of GeForce cards the
    package's GPU table has a row for (its ``variant`` is ``GeForce``): RTX 3090, RTX 4090 and
    RTX 5090, 28 of the snapshot's 64 rows. Left out: the datacenter GPUs (V100, A100, L40S,
    H100, H200: the issue's market takes those from AWS), the workstation cards (RTX A5000,
    RTX A6000, RTX 6000 Ada, RTX 5880 Ada, RTX PRO 6000 WS), and the GeForce RTX 3060, 4060,
    4070 and 5070 rows (5 rows), which the GPU table has no row for: their speed would be an
    invented prior, not data.
  - ``all``: every row whose GPU model the GPU table knows (the consumer rows plus the
    datacenter and workstation ones, e.g. a 1× V100 at $0.18/h, the cheapest per hour).

Spot availability: the "Can't Be Late" AWS traces
(``traces/cbl_spot_traces/availability/1-node/aws-10-26-2022``, 13 days, a probe every 600 s,
**1 = available, 0 = unavailable**, as :func:`providers.replay.timeline.load_trace` reads
them), us-west-2a for ``usw2-az1`` and us-west-2b for ``usw2-az2`` (AWS maps zone names to zone
ids per account: that pairing is an assumption). p3.2xlarge gets its own type's trace
(``v100_1``). No trace exists for g4dn, g5, g6 or p4d: the single-GPU types borrow the
p2.xlarge trace (``k80_1``) and p4d the p3.16xlarge one (``v100_8``), each type's copy rotated
by a whole number of days (:data:`ROTATE_DAYS`) so that types in one zone are not reclaimed at
the very same ticks. Traces loop past their end.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from providers.catalog.reader import CatalogEntry, machine_of, parse_catalog
from providers.replay.market import ReplayMarket, ReplayOffer, default_notice
from providers.replay.timeline import AvailabilityTrace, PriceSeries, load_trace

AWS_CATALOG = "catalogs/aws_skypilot_v7_gpu/vms_gpu_rows_partial.csv"
VAST_CATALOG = "catalogs/anycloud_2026-05-20/vast/vms.csv"
TRACE_DIR = "traces/cbl_spot_traces/availability/1-node/aws-10-26-2022"
AWS_REGION = "us-west-2"
ZONE_TRACES = {"usw2-az1": "us-west-2a", "usw2-az2": "us-west-2b"}
AWS_TYPES = {  # instance type -> the trace it uses (its own for p3.2xlarge, borrowed otherwise)
    "g4dn.xlarge": "k80_1", "g5.xlarge": "k80_1", "g6.xlarge": "k80_1",
    "p3.2xlarge": "v100_1", "p4d.24xlarge": "v100_8",
}
ROTATE_DAYS = {"g4dn.xlarge": 0, "g5.xlarge": 3, "g6.xlarge": 6, "p3.2xlarge": 0,
               "p4d.24xlarge": 0}
AWS_NOTICE_S = 120.0   # AWS's two-minute interruption notice


def rotated(trace: AvailabilityTrace, days: int) -> AvailabilityTrace:
    """``trace`` started ``days`` days later (its samples rotated; the trace loops anyway)."""
    shift = round(days * 86400 / trace.gap_seconds) % len(trace.data)
    return replace(trace, data=trace.data[shift:] + trace.data[:shift],
                   source=f"{trace.source} rotated {days} d" if days else trace.source)


def _read(path: Path) -> list[CatalogEntry]:
    return parse_catalog(path.read_text(), str(path)).entries


def aws_offers(data_dir: Path) -> list[ReplayOffer]:
    """The AWS offers of the module docstring, with their traces."""
    out = []
    for e in _read(data_dir / AWS_CATALOG):
        if e.region != AWS_REGION or e.zone not in ZONE_TRACES or e.instance_type not in AWS_TYPES:
            continue
        trace_name = f"{ZONE_TRACES[e.zone]}_{AWS_TYPES[e.instance_type]}.json"
        trace = load_trace(data_dir / TRACE_DIR / trace_name)
        spot = None if e.spot_price_usd_per_hour is None else PriceSeries(e.spot_price_usd_per_hour)
        out.append(ReplayOffer(
            provider="aws", **machine_of(e), on_demand_price_usd_per_hour=e.on_demand_price_usd_per_hour,
            spot_prices=spot, trace=rotated(trace, ROTATE_DAYS[e.instance_type]) if spot else None,
            notice=default_notice("aws", AWS_NOTICE_S)))
    return out


VAST_SELECTIONS = ("consumer", "all")


def consumer_gpu(model: str) -> bool:
    """A GeForce card the GPU table has a row for (``RTX4090``, ``RTX_4090``, ...)."""
    from policies.gpu_table import gpu_spec

    row = gpu_spec(model)
    return row is not None and row.variant == "GeForce"


def known_gpu(model: str) -> bool:
    """Any GPU model the GPU table has a row for."""
    from policies.gpu_table import gpu_spec

    return gpu_spec(model) is not None


def vast_offers(data_dir: Path, known_gpu) -> list[ReplayOffer]:
    """Vast on-demand offers whose GPU model ``known_gpu(name)`` accepts."""
    return [ReplayOffer(provider="vastai", **machine_of(e),
                        on_demand_price_usd_per_hour=e.on_demand_price_usd_per_hour,
                        spot_prices=None, notice=default_notice("vastai", 0.0))
            for e in _read(data_dir / VAST_CATALOG)
            if e.on_demand_price_usd_per_hour is not None and known_gpu(e.gpu_model)]


def build_market(data_dir: Path, vast: str | None = "consumer") -> ReplayMarket:
    """The benchmark market read from ``data_dir`` (``GA_DATA_DIR``): AWS, plus the Vast rows
    of selection ``vast`` (:data:`VAST_SELECTIONS`; ``None``: AWS only). Its name says which:
    ``aws+vast-consumer``, ``aws+vast-all`` or ``aws``.

    Raises:
        ValueError: ``vast`` is not a selection.
    """
    offers = aws_offers(data_dir)
    if vast is not None:
        if vast not in VAST_SELECTIONS:
            raise ValueError(f"vast must be one of {VAST_SELECTIONS} or None, got {vast!r}")
        offers += vast_offers(data_dir, consumer_gpu if vast == "consumer" else known_gpu)
    return ReplayMarket(name=f"aws+vast-{vast}" if vast else "aws", path=data_dir,
                        time_scale=1.0, notice_seconds=AWS_NOTICE_S, start_offset_hours=0.0,
                        offers=offers)

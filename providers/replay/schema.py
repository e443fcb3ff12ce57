"""The market file's schema (YAML), validated with pydantic; unknown fields are errors.

::

    name: demo                     # required
    description: free text         # optional
    time_scale: 60                 # market seconds per wall second (default 1)
    notice_seconds: 10             # wall seconds from a preemption notice to the reclaim (120)
    start_offset_hours: 0          # market time (hours into the traces) at the epoch (0)
    agent_start_timeout_s: 300     # optional: how long the scheduler waits for an agent (300)
    offers:                        # offers written down by hand
      - provider: aws              # default "replay"
        region: us-east-1
        zone: us-east-1a
        instance_type: g4dn.xlarge
        gpu_model: T4
        gpu_count: 1
        vram_gib: 16               # per GPU
        vcpus: 4
        memory_gib: 16
        on_demand_price_usd_per_hour: 0.526     # optional: no on-demand market when absent
        spot_price_usd_per_hour: 0.19           # optional: no spot market when absent
        interruption_risk: 0.05                 # optional; else derived from the trace
        availability_trace: markets/a.json      # optional; spot only; none = always available
        # or, for a CSV step trace: {path: t.csv, time_unit: hours, gap_seconds: 60}
        instances: 16                           # optional: a fixed pool per market (unbounded)
        boot_failures: 1                        # optional: first N launches never boot (0)
        spot_price_series:                      # optional price steps (market hours)
          - {at_hours: 4, price: 0.21}
        notice: {style: azure, seconds: 30}     # optional, see below
        speed: 0.61                             # optional; how fast jobs run here (1)
    catalogs:                      # real catalogs in SkyPilot vms.csv format
      - path: ${GA_DATA_DIR}/catalogs/aws_skypilot_v7_gpu/vms_gpu_rows_partial.csv
        provider: aws              # default "replay"
        instance_types: [p3.2xlarge]   # optional filters
        regions: [us-west-2]
        zones: [usw2-az1]
        notice: {style: gcp}       # optional, for every offer of the catalog
        speed: 0.375               # optional, for every offer of the catalog (1)
    traces:                        # availability traces for spot offers (any source)
      - {instance_type: p3.2xlarge, zone: usw2-az1, path: ..., provider: aws}   # provider optional
      # CSV step traces take time_unit and gap_seconds here too (see below)

Every offer needs at least one of the two prices.

**Capacity.** A trace that counts instances (some tick reads more than 1, as Bamboo's and the
multi-node traces do; :mod:`providers.replay.timeline`) lets a spot offer run at most the
trace's count at once; a 0/1 availability trace (the 1-node probes) bounds it only where it
reads 0 (its 1 says the probe ran, not that one instance was all there was); and
``instances: K`` caps each of the offer's markets (on-demand and spot each) at K instances at
once; with both, the smaller bound holds. An offer lists ``capacity`` = that bound minus its
instances not yet terminated (pending, running or shutting down; never below 0), or ``None``
with neither (unbounded, as a cloud whose own limit decides at launch). A launch beyond it is
refused as a stockout (``409 InsufficientInstanceCapacity``, ``CapacityError``). When a spot
trace's count drops below the instances running, the excess is reclaimed as a count of 0
reclaims them all: a notice in the offer's style, then terminated as preempted. The
**newest launched** are reclaimed first (ties: the larger instance id); instances already
warned or shutting down count toward the excess.

**Trace files.** ``availability_trace`` (and ``traces[].path``) is a ``cbl_spot_traces`` JSON
file or a CSV step trace (``.csv``, Bamboo's ``time,running_spot_instances``). A CSV is
resampled onto ``gap_seconds`` (60) ticks, each holding the count in force at its start;
``time_unit`` (``hours``, default, or ``seconds``) is the unit of a CSV without a header (the
Bamboo files without ``_scaled`` in their name count seconds); see
:func:`providers.replay.timeline.load_trace`.

``boot_failures: N`` is a fault for tests and demos: the first N instances launched in each of
the offer's markets are a launch the cloud accepted but never booted. They stay ``pending``
(no agent ever starts, a retried launch with their client token does not start one) and
hold capacity until terminated. Counted over the cloud's whole life (its state file).

``speed`` is how fast a job runs on the offer, relative to the machine the replay runs on
(1: as fast; 0.5: half as fast; between :data:`MIN_SPEED` and :data:`MAX_SPEED`). The replayed
instance exports it to the agent and so to the job as ``SCHED_REPLAY_SPEED``; a job that
honours it (``examples/charlm/train.py`` does) stretches its wall time by ``1/speed``. It is
the market's hidden truth: the daemon never reads it, it measures the job's progress.

``notice`` says how a reclaimed spot instance of the offer is warned, as the imitated cloud
does it: ``style`` is where its agent reads the notice (``aws`` IMDSv2, ``aliyun`` ECS
metadata, ``azure`` Scheduled Events, ``gcp`` ``instance/preempted``) or ``none`` (no notice:
the instance just stops, as a Vast.ai interruptible instance that is outbid); ``seconds`` is
the wall time from the notice to the reclaim (default ``notice_seconds``; both at most
:data:`MAX_NOTICE_SECONDS`, a day, far beyond any cloud's warning). Without ``notice``
the style follows the offer's provider (:data:`DEFAULT_NOTICE_STYLES`, else ``aws``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core.models.base import StrictModel

DEFAULT_PROVIDER = "replay"
# AWS gives two minutes between the spot interruption notice and the reclaim.
DEFAULT_NOTICE_SECONDS = 120.0
# A day: longer than any cloud warns (Alibaba's 5 minutes is the longest), and small enough that
# a notice's end is a representable time.
MAX_NOTICE_SECONDS = 86400.0
# A job 100 times slower than the host would take minutes per demo second; 100 times faster
# is beyond any GPU generation gap.
MIN_SPEED = 0.01
MAX_SPEED = 100.0
NoticeStyle = Literal["aws", "aliyun", "azure", "gcp", "none"]
# Each imitated cloud's own way of warning (shared/data/api_examples/NOTICES.md); any other
# provider name gets AWS's.
DEFAULT_NOTICE_STYLES: dict[str, NoticeStyle] = {
    "aws": "aws", "aliyun": "aliyun", "azure": "azure", "gcp": "gcp", "vastai": "none",
}


class NoticeSpec(StrictModel):
    """How a reclaimed spot instance is warned: ``style`` (see the module docstring) and
    ``seconds`` of wall time from notice to reclaim (``None``: the market's
    ``notice_seconds``; ignored for ``none``)."""

    style: NoticeStyle
    seconds: float | None = Field(default=None, ge=0, le=MAX_NOTICE_SECONDS)


class PricePointSpec(StrictModel):
    """A spot price step: from ``at_hours`` of market time on, the price is ``price`` USD/hour."""

    at_hours: float = Field(ge=0)
    price: float = Field(ge=0)


TimeUnit = Literal["hours", "seconds"]


class TraceFileSpec(StrictModel):
    """An availability trace file and, for a CSV step trace, how to read it: ``time_unit``
    of a header-less file (``None``: hours) and ``gap_seconds`` of the resampled ticks
    (``None``: :data:`providers.replay.timeline.DEFAULT_CSV_GAP_S`)."""

    path: str = Field(min_length=1)
    time_unit: TimeUnit | None = None
    gap_seconds: float | None = Field(default=None, gt=0)


class OfferSpec(StrictModel):
    """One hand-written offer: an instance type in one zone, on-demand and/or spot."""

    provider: str = Field(default=DEFAULT_PROVIDER, min_length=1)
    region: str = Field(min_length=1)
    zone: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    gpu_model: str = Field(min_length=1)
    gpu_count: int = Field(ge=0)
    vram_gib: float = Field(ge=0)
    vcpus: int = Field(ge=0)
    memory_gib: float = Field(ge=0)
    on_demand_price_usd_per_hour: float | None = Field(default=None, ge=0)
    spot_price_usd_per_hour: float | None = Field(default=None, ge=0)
    interruption_risk: float | None = Field(default=None, ge=0, le=1)
    availability_trace: str | TraceFileSpec | None = None
    instances: int | None = Field(default=None, ge=0)
    boot_failures: int = Field(default=0, ge=0)
    spot_price_series: list[PricePointSpec] = Field(default_factory=list)
    notice: NoticeSpec | None = None
    speed: float = Field(default=1.0, ge=MIN_SPEED, le=MAX_SPEED)

    @model_validator(mode="after")
    def _markets_consistent(self) -> OfferSpec:
        if self.on_demand_price_usd_per_hour is None and self.spot_price_usd_per_hour is None:
            raise ValueError(
                "give on_demand_price_usd_per_hour, spot_price_usd_per_hour or both"
            )
        if self.spot_price_usd_per_hour is None:
            spot_only = {
                "availability_trace": self.availability_trace,
                "spot_price_series": self.spot_price_series or None,
                "interruption_risk": self.interruption_risk,
                "notice": self.notice,
            }
            for field, value in spot_only.items():
                if value is not None:
                    raise ValueError(
                        f"{field} applies to the spot market; set spot_price_usd_per_hour too"
                    )
        return self


class CatalogSpec(StrictModel):
    """A real catalog file (SkyPilot ``vms.csv``) and the filters choosing rows from it."""

    path: str = Field(min_length=1)
    provider: str = Field(default=DEFAULT_PROVIDER, min_length=1)
    instance_types: list[str] | None = None
    regions: list[str] | None = None
    zones: list[str] | None = None
    notice: NoticeSpec | None = None
    speed: float = Field(default=1.0, ge=MIN_SPEED, le=MAX_SPEED)


class TraceSpec(StrictModel):
    """Assigns an availability trace to the spot offers with this instance type and zone
    (and provider, when given) that have no ``availability_trace`` of their own."""

    instance_type: str = Field(min_length=1)
    zone: str = Field(min_length=1)
    path: str = Field(min_length=1)
    provider: str | None = None
    time_unit: TimeUnit | None = None
    gap_seconds: float | None = Field(default=None, gt=0)


class MarketSpec(StrictModel):
    """The whole market file."""

    name: str = Field(min_length=1)
    description: str | None = None
    time_scale: float = Field(default=1.0, gt=0)
    notice_seconds: float = Field(default=DEFAULT_NOTICE_SECONDS, ge=0, le=MAX_NOTICE_SECONDS)
    start_offset_hours: float = Field(default=0.0, ge=0)
    agent_start_timeout_s: float | None = Field(default=None, gt=0)
    offers: list[OfferSpec] = Field(default_factory=list)
    catalogs: list[CatalogSpec] = Field(default_factory=list)
    traces: list[TraceSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_offers(self) -> MarketSpec:
        if not self.offers and not self.catalogs:
            raise ValueError("a market needs offers, catalogs or both")
        return self

"""Data models (pydantic v2). One module per noun; re-exported here for convenience."""

from core.models.base import StrictModel, ValueModel, parse_lenient, utcnow
from core.models.checkpoints import CheckpointFile, CheckpointManifest
from core.models.errors import describe_validation_error, format_validation_error
from core.models.instances import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    TAG_RANK,
    Instance,
    InstanceState,
    PreemptionNotice,
)
from core.models.jobs import Job, JobEvent, JobState, StopKind, StopRequest
from core.models.offers import Market, Offer, OfferKey, PriceObservation
from core.models.placements import GangNode, Placement, PlacementEnd, PriceChange
from core.models.specs import AllowDeny, CheckpointSpec, JobSpec, MarketChoice, Resources, WorkSpec
from core.models.work import GpuSample, ProgressPoint, WorkUnit, Workload

__all__ = [
    "TAG_ATTEMPT",
    "TAG_RANK",
    "TAG_JOB",
    "TAG_OWNER",
    "AllowDeny",
    "CheckpointFile",
    "CheckpointManifest",
    "CheckpointSpec",
    "Instance",
    "InstanceState",
    "Job",
    "JobEvent",
    "JobSpec",
    "JobState",
    "Market",
    "MarketChoice",
    "Offer",
    "OfferKey",
    "GangNode",
    "Placement",
    "PlacementEnd",
    "PreemptionNotice",
    "PriceChange",
    "PriceObservation",
    "Resources",
    "StopKind",
    "StopRequest",
    "StrictModel",
    "ValueModel",
    "GpuSample",
    "ProgressPoint",
    "WorkSpec",
    "WorkUnit",
    "Workload",
    "describe_validation_error",
    "format_validation_error",
    "parse_lenient",
    "utcnow",
]

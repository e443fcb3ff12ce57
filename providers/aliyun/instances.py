"""Pure translation of ECS instances: ``Instance`` dicts of ``DescribeInstances`` →
:class:`core.models.Instance`, and the ``Recycling`` lock of a reclaimed spot instance → its
:class:`core.models.PreemptionNotice`. No I/O, no clock."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from core.models import Instance, InstanceState, Market, OfferKey, PreemptionNotice
from providers.regional_api import aware_utc, known

PROVIDER = "aliyun"
# ECS puts a reclaimed spot instance in the Recycling lock and releases it about five minutes
# later (PreemptibleOverview.md: "After five minutes, the instance is automatically released").
SPOT_NOTICE_LEAD_S = 300
# ECS Status → InstanceState. We never stop instances: a Stopped one was stopped by someone
# else and no longer runs its job (as the AWS adapter treats EC2's "stopped").
STATES: dict[str, InstanceState] = {
    "Pending": InstanceState.PENDING, "Starting": InstanceState.PENDING,
    "Running": InstanceState.RUNNING, "Stopping": InstanceState.SHUTTING_DOWN,
    "Stopped": InstanceState.TERMINATED, "Deleted": InstanceState.TERMINATED,
}


def tags_of(raw: dict[str, Any]) -> dict[str, str]:
    """``Tags.Tag[] = {"TagKey", "TagValue"}`` → ``{key: value}``."""
    tags = (raw.get("Tags") or {}).get("Tag") or []
    return {str(t.get("TagKey")): str(t.get("TagValue") or "") for t in tags if t.get("TagKey")}


def is_recycling(raw: dict[str, Any]) -> bool:
    """True when ECS is reclaiming the (spot) instance: an ``OperationLocks.LockReason[]`` entry
    with ``LockReason`` ``Recycling`` (PreemptibleOverview.md)."""
    locks = (raw.get("OperationLocks") or {}).get("LockReason") or []
    return any(str(lock.get("LockReason")) == "Recycling" for lock in locks)


def recycling_notice(first_seen_at: datetime, now: datetime) -> PreemptionNotice:
    """The notice for an instance first seen ``Recycling`` at ``first_seen_at``: release about
    five minutes later (:data:`SPOT_NOTICE_LEAD_S`)."""
    return PreemptionNotice(action="terminate",
                            action_at=first_seen_at + timedelta(seconds=SPOT_NOTICE_LEAD_S),
                            received_at=now)


def instance_from_api(raw: dict[str, Any], region: str, *, client_token_tag: str,
                      notice: PreemptionNotice | None = None) -> Instance:
    """An ECS ``Instance`` dict → :class:`Instance`.

    Market: ``spot`` unless ``SpotStrategy`` is ``NoSpot`` (or absent). ``Status`` maps through
    :data:`STATES`. The client token is read from the ``client_token_tag`` tag (ECS does not
    return ``ClientToken``). Raises ``ValueError`` naming the field for an unknown status or a
    missing field.
    """
    try:
        instance_id, itype = str(raw["InstanceId"]), str(raw["InstanceType"])
        zone, status = str(raw["ZoneId"]), str(raw["Status"])
        launched_at = aware_utc(raw["CreationTime"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"ECS instance missing or bad field: {exc!r}") from None
    state = known(STATES, status, f"ECS instance {instance_id}: Status")
    market = Market.ON_DEMAND if raw.get("SpotStrategy", "NoSpot") == "NoSpot" else Market.SPOT
    tags = tags_of(raw)
    return Instance(
        id=instance_id, provider=PROVIDER,
        offer=OfferKey(provider=PROVIDER, region=region, zone=zone, instance_type=itype,
                       market=market),
        client_token=tags.get(client_token_tag, ""), state=state, launched_at=launched_at,
        tags=tags, notice=notice,
        terminated_reason=("stopped" if status in ("Stopped", "Stopping") else
                           "released" if status == "Deleted" else None),
    )

"""Pure translation of EC2 instances: ``Instance`` dicts (``describe_instances``,
``run_instances``) → :class:`core.models.Instance`, and a ``SpotInstanceRequest`` marked for
interruption → its :class:`core.models.PreemptionNotice`. No I/O, no clock."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from core.models import Instance, InstanceState, Market, OfferKey, PreemptionNotice
from providers.regional_api import aware_utc, known

PROVIDER = "aws"
# AWS gives a spot instance two minutes between the interruption notice and the action.
SPOT_NOTICE_LEAD_S = 120

STATES: dict[str, InstanceState] = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "shutting-down": InstanceState.SHUTTING_DOWN,
    "stopping": InstanceState.SHUTTING_DOWN,
    "terminated": InstanceState.TERMINATED,
    # We launch with InstanceInitiatedShutdownBehavior=terminate; a stopped instance was stopped
    # by someone else and no longer runs its job.
    "stopped": InstanceState.TERMINATED,
}
# StateReason.Code → Instance.terminated_reason ("preempted" is what the controller keys on).
TERMINATED_REASONS: dict[str, str] = {
    "Server.SpotInstanceTermination": "preempted",
    "Server.SpotInstanceShutdown": "preempted",
    "Client.UserInitiatedShutdown": "terminated on request",
    "Client.InstanceInitiatedShutdown": "shut down from inside the instance",
    "Server.InsufficientInstanceCapacity": "no capacity at launch",
    "Server.InternalError": "AWS internal error",
    "Client.InternalError": "launch failed (client error)",
    "Client.VolumeLimitExceeded": "volume limit exceeded",
    "Server.ScheduledStop": "scheduled retirement",
}
NOTICE_ACTIONS = {"marked-for-termination": "terminate", "marked-for-stop": "stop",
                  "marked-for-hibernation": "hibernate"}



def instance_from_api(raw: dict[str, Any], region: str,
                      notice: PreemptionNotice | None = None) -> Instance:
    """An EC2 ``Instance`` dict → :class:`Instance`.

    Market: ``spot`` when ``InstanceLifecycle == "spot"``, else ``on-demand``. State names map
    through :data:`STATES`; a gone instance gets ``terminated_reason`` from
    ``StateReason.Code`` (:data:`TERMINATED_REASONS`; a spot interruption is ``preempted``).
    Raises ``ValueError`` naming the field for an unknown state or a missing field.
    """
    try:
        state_name = raw["State"]["Name"]
        zone = raw["Placement"]["AvailabilityZone"]
        instance_id, itype = raw["InstanceId"], raw["InstanceType"]
        launched_at = aware_utc(raw["LaunchTime"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"EC2 instance missing or bad field: {exc!r}") from None
    state = known(STATES, state_name, f"EC2 instance {instance_id}: State.Name")
    reason = None
    if state.is_gone():
        code = (raw.get("StateReason") or {}).get("Code") or ""
        if code in TERMINATED_REASONS:
            reason = TERMINATED_REASONS[code]
        else:
            reason = "stopped" if state_name in ("stopped", "stopping") else (code or state_name)
    market = Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND
    return Instance(
        id=instance_id, provider=PROVIDER,
        offer=OfferKey(provider=PROVIDER, region=region, zone=zone, instance_type=itype,
                       market=market),
        client_token=raw.get("ClientToken") or "", state=state, launched_at=launched_at,
        tags={t["Key"]: t.get("Value", "") for t in raw.get("Tags") or []},
        notice=notice, terminated_reason=reason,
    )


def notice_from_spot_request(request: dict[str, Any],
                             received_at: datetime) -> PreemptionNotice | None:
    """A ``SpotInstanceRequest`` whose ``Status.Code`` is ``marked-for-termination`` (or
    ``-stop``/``-hibernation``) → the notice, with ``action_at`` = ``Status.UpdateTime`` + 2 min
    (AWS's notice lead); else None."""
    status = request.get("Status") or {}
    action = NOTICE_ACTIONS.get(status.get("Code", ""))
    if action is None or status.get("UpdateTime") is None:
        return None
    at = aware_utc(status["UpdateTime"]) + timedelta(seconds=SPOT_NOTICE_LEAD_S)
    return PreemptionNotice(action=action, action_at=at, received_at=received_at)


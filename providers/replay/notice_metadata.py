"""Azure's Scheduled Events and GCP's ``instance/preempted`` as a replayed instance serves them
(under ``/meta/<id>``), built from its record. Shapes: ``shared/data/api_examples/azure``
(``scheduled_events_*.json``) and ``gcp/metadata_preempted_examples.json``.

Azure (``GET|POST /meta/<id>/metadata/scheduledevents?api-version=2020-07-01``, header
``Metadata: true``, else 400 as Azure answers):

- no notice: ``{"DocumentIncarnation": 1, "Events": []}``;
- a notice: incarnation 2 and one event ``{"EventId", "EventStatus": "Scheduled",
  "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": [<id>], "NotBefore":
  RFC 1123 reclaim time, "Description": "", "EventSource": "Platform", "DurationInSeconds":
  -1}``;
- approved (``POST {"StartRequests": [{"EventId"}]}``): incarnation 3, ``EventStatus``
  ``Started`` and ``NotBefore`` empty, as Azure shows an event under way.

``GET /meta/<id>/metadata/instance/compute/name?api-version=...&format=text`` is the VM's name
(the instance id). GCP (``GET /meta/<id>/computeMetadata/v1/instance/preempted``, header
``Metadata-Flavor: Google``, else 403): ``FALSE``, ``TRUE`` once the notice is out.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from email.utils import format_datetime
from typing import Any

from core.models import PreemptionNotice
from core.models.base import ensure_utc

AZURE_HEADER = ("Metadata", "true")
GCP_HEADER = ("Metadata-Flavor", "Google")
# A fixed namespace makes an instance's event id the same across cloud restarts.
_EVENT_NAMESPACE = uuid.UUID("6f1d5c2e-3a0b-4c8e-9d7f-2b1e0a9c4d33")


def preempt_event_id(instance_id: str) -> str:
    """The ``EventId`` of ``instance_id``'s Preempt event (upper-case UUID, as Azure's)."""
    return str(uuid.uuid5(_EVENT_NAMESPACE, instance_id)).upper()


def rfc1123(at: datetime) -> str:
    """``Tue, 09 Aug 2022 17:07:32 GMT``, as Scheduled Events writes ``NotBefore``."""
    return format_datetime(ensure_utc(at).replace(microsecond=0), usegmt=True)


def scheduled_events(instance_id: str, notice: PreemptionNotice | None,
                     approved: bool) -> dict[str, Any]:
    """The Scheduled Events document of one instance (see the module docstring)."""
    if notice is None:
        return {"DocumentIncarnation": 1, "Events": []}
    return {"DocumentIncarnation": 3 if approved else 2, "Events": [{
        "EventId": preempt_event_id(instance_id),
        "EventStatus": "Started" if approved else "Scheduled",
        "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": [instance_id],
        "NotBefore": "" if approved else rfc1123(notice.action_at),
        "Description": "", "EventSource": "Platform", "DurationInSeconds": -1,
    }]}


def start_request_ids(body: bytes) -> list[str]:
    """The ``EventId`` values of a ``{"StartRequests": [{"EventId": str}, ...]}`` body.
    Raises ``ValueError`` (Azure answers 400) when the body is not that shape or is empty."""
    try:
        ids = [item["EventId"] for item in json.loads(body or b"null")["StartRequests"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"StartRequests body malformed: {exc}") from None
    if not ids or not all(isinstance(i, str) and i for i in ids):
        raise ValueError("StartRequests needs at least one EventId string")
    return ids


def gcp_preempted(notice: PreemptionNotice | None) -> str:
    """``instance/preempted``'s text: ``TRUE`` once a notice is out, else ``FALSE``."""
    return "TRUE" if notice is not None else "FALSE"

"""expected_hours, budget_usd, owner (issue 6): strict validation naming the field, and the
job fields they drive."""

import pytest
from pydantic import ValidationError

from core.models import Job, JobState, PlacementEnd, StopKind, StopRequest, utcnow
from core.models.errors import describe_validation_error
from tests.factories.jobs import spec


def _bad(**fields) -> list[str]:
    with pytest.raises(ValidationError) as info:
        spec(**fields)
    return [p["field"] for p in describe_validation_error(info.value)]


def test_defaults_and_valid_values():
    s = spec()
    assert s.expected_hours is None and s.budget_usd is None and s.owner == "default"
    s = spec(expected_hours=12.5, budget_usd=40, owner="alice.smith")
    assert (s.expected_hours, s.budget_usd, s.owner) == (12.5, 40.0, "alice.smith")


@pytest.mark.parametrize("fields, name", [
    ({"expected_hours": 0}, "expected_hours"),
    ({"expected_hours": -1}, "expected_hours"),
    ({"expected_hours": "lots"}, "expected_hours"),
    ({"budget_usd": 0}, "budget_usd"),
    ({"budget_usd": -5}, "budget_usd"),
    ({"owner": "Alice"}, "owner"),
    ({"owner": ""}, "owner"),
    ({"owner": "a b"}, "owner"),
    ({"owner": "x" * 64}, "owner"),
])
def test_bad_values_name_the_field(fields, name):
    assert _bad(**fields) == [name]


def test_remaining_hours_from_saved_progress():
    now = utcnow()
    job = Job(id="j", spec=spec(expected_hours=10), created_at=now, updated_at=now)
    assert job.remaining_hours() == 10
    job.progress_h = 4
    assert job.remaining_hours() == 6
    job.progress_h = 12
    assert job.remaining_hours() == 0
    assert Job(id="k", spec=spec(), created_at=now, updated_at=now).remaining_hours() is None


def test_stopped_is_terminal_and_new_enums_round_trip():
    assert JobState.STOPPED.is_terminal()
    assert PlacementEnd("moved") is PlacementEnd.MOVED
    now = utcnow()
    job = Job(id="j", spec=spec(), created_at=now, updated_at=now,
              stop_request=StopRequest(kind=StopKind.MOVE, reason="cheaper", attempt=1))
    job.record(JobState.CHECKPOINTING, "moving", kind="migration")
    again = Job.model_validate_json(job.model_dump_json())
    assert again == job and again.events[-1].kind == "migration"

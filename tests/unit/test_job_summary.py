"""``derived`` figures of a job summary (what ``schedctl status``/``list`` and the demo show)."""

from datetime import timedelta

from core.models import Job, JobState
from core.models.placements import Placement, PlacementEnd
from scheduler.services.jobs import summary
from tests.factories.jobs import spec
from tests.factories.offers import T0, offer


def _placement(attempt: int, end: PlacementEnd | None) -> Placement:
    start = T0 + timedelta(hours=attempt)
    return Placement(attempt=attempt, offer=offer(), client_token=f"j-{attempt}", decided_at=start,
                     instance_id=f"i-{attempt}", started_at=start,
                     ended_at=None if end is None else start + timedelta(minutes=30),
                     end_reason=end)


def _job(ends: list[PlacementEnd], state: JobState, current: bool) -> Job:
    job = Job(id="j", spec=spec(), created_at=T0, updated_at=T0, state=state)
    job.placements = [_placement(i + 1, end) for i, end in enumerate(ends)]
    job.placement = _placement(len(ends) + 1, None) if current else None
    return job


def test_price_moves_count_as_migrations():
    job = _job([PlacementEnd.PREEMPTED, PlacementEnd.MOVED, PlacementEnd.LOST], JobState.RUNNING,
               current=True)
    assert summary(job)["derived"]["migrations"] == 3


def test_the_last_placement_of_a_finished_job_is_no_migration():
    done = _job([PlacementEnd.MOVED, PlacementEnd.SUCCEEDED], JobState.SUCCEEDED, current=False)
    assert summary(done)["derived"]["migrations"] == 1
    # reclaimed, then cancelled while waiting for a new offer: it never went on
    cancelled = _job([PlacementEnd.PREEMPTED], JobState.CANCELLED, current=False)
    assert summary(cancelled)["derived"]["migrations"] == 0
    failed = _job([PlacementEnd.LAUNCH_FAILED, PlacementEnd.FAILED], JobState.FAILED, current=False)
    assert summary(failed)["derived"]["migrations"] == 0

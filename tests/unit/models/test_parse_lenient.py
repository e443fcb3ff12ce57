import json

from core.models import Job, JobState, parse_lenient, utcnow
from tests.factories.jobs import spec
from tests.factories.offers import offer


def test_fields_from_a_newer_version_are_ignored_at_any_depth():
    now = utcnow()
    job = Job(id="j", spec=spec(), created_at=now, updated_at=now)
    job.record(JobState.PROVISIONING, "placed", offer=offer())
    data = json.loads(job.model_dump_json())
    data["new_top_level"] = 1
    data["spec"]["resources"]["new_nested"] = "x"
    data["events"][0]["new_in_list"] = True
    parsed = parse_lenient(Job, json.dumps(data))
    assert parsed == job

"""Every free-text field of a job spec is bounded (core.models.limits): at its limit it
is accepted, one past it is refused naming the field and saying the limit; the whole spec is
bounded too. A job stored before a limit existed still reads (the store is not user input)."""

from __future__ import annotations

import pytest

from core.models import JobSpec, parse_lenient, utcnow
from core.models import limits as L
from core.models.jobs import Job
from scheduler.services.jobs import SpecError, parse_spec

BASE = {"name": "train", "command": "python train.py"}


def names(n: int, size: int = 8) -> list[str]:
    return [f"n{i:0{size - 1}d}" for i in range(n)]


# (field path as named in the 422, spec fragment at the limit, fragment one past it)
CASES = [
    ("command", {"command": "x" * L.COMMAND_MAX_CHARS}, {"command": "x" * (L.COMMAND_MAX_CHARS + 1)}),
    ("workdir", {"workdir": "w" * L.WORKDIR_MAX_CHARS}, {"workdir": "w" * (L.WORKDIR_MAX_CHARS + 1)}),
    ("env", {"env": {f"V{i}": "" for i in range(L.ENV_MAX_VARS)}},
     {"env": {f"V{i}": "" for i in range(L.ENV_MAX_VARS + 1)}}),
    ("env", {"env": {"A" * L.ENV_NAME_MAX_CHARS: "1"}}, {"env": {"A" * (L.ENV_NAME_MAX_CHARS + 1): "1"}}),
    ("env", {"env": {"A": "v" * L.ENV_VALUE_MAX_CHARS}}, {"env": {"A": "v" * (L.ENV_VALUE_MAX_CHARS + 1)}}),
    ("regions.allow", {"regions": {"allow": names(L.LIST_MAX_ITEMS)}},
     {"regions": {"allow": names(L.LIST_MAX_ITEMS + 1)}}),
    ("zones.deny", {"zones": {"deny": ["z" * L.LIST_ITEM_MAX_CHARS]}},
     {"zones": {"deny": ["z" * (L.LIST_ITEM_MAX_CHARS + 1)]}}),
    ("providers.allow", {"providers": {"allow": ["p" * L.LIST_ITEM_MAX_CHARS]}},
     {"providers": {"allow": ["aws", "p" * (L.LIST_ITEM_MAX_CHARS + 1)]}}),
    ("resources.gpu_models", {"resources": {"gpu_models": names(L.LIST_MAX_ITEMS)}},
     {"resources": {"gpu_models": names(L.LIST_MAX_ITEMS + 1)}}),
    ("checkpoint.dir", {"checkpoint": {"dir": "d" * L.CHECKPOINT_DIR_MAX_CHARS}},
     {"checkpoint": {"dir": "d" * (L.CHECKPOINT_DIR_MAX_CHARS + 1)}}),
    ("owner", {"owner": "o" * L.NAME_MAX_CHARS}, {"owner": "o" * (L.NAME_MAX_CHARS + 1)}),
    ("name", {"name": "n" * L.NAME_MAX_CHARS}, {"name": "n" * (L.NAME_MAX_CHARS + 1)}),
    ("(spec)", {"env": {f"V{i}": "v" * 12_000 for i in range(5)}},
     {"env": {f"V{i}": "v" * 14_000 for i in range(5)}}),
]


@pytest.mark.parametrize("field,at_limit,over", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_field_is_accepted_at_its_limit_and_refused_past_it(field, at_limit, over):
    parse_spec({**BASE, **at_limit})
    with pytest.raises(SpecError) as caught:
        parse_spec({**BASE, **over})
    [problem] = caught.value.problems
    assert problem["field"] == field
    assert "at most" in problem["problem"] or "1-63" in problem["problem"]
    assert len(str(problem["value"])) <= 400  # the refused value is echoed cut short


def test_a_60_mib_command_is_refused_quickly_and_not_echoed():
    with pytest.raises(SpecError) as caught:
        parse_spec({**BASE, "command": "x" * (60 * 1024 * 1024)})
    [problem] = caught.value.problems
    assert problem["field"] == "command"
    assert f"at most {L.COMMAND_MAX_CHARS} characters, got {60 * 1024 * 1024}" in problem["problem"]
    assert len(problem["value"]) < 300


def test_a_job_stored_before_the_limits_still_reads():
    spec = JobSpec.model_construct(**{**JobSpec.model_validate(BASE).__dict__,
                                      "command": "x" * (L.COMMAND_MAX_CHARS * 4)})
    now = utcnow()
    raw = Job.model_construct(id="old-1", spec=spec, created_at=now, updated_at=now).model_dump_json()
    job = parse_lenient(Job, raw)
    assert len(job.spec.command) == L.COMMAND_MAX_CHARS * 4
    assert parse_lenient(Job, {**Job.model_validate_json(raw, context={"stored": True}).model_dump(
        mode="json"), "unknown_new_field": 1}).spec.command == spec.command

"""Numbers in user input are strict and finite: YAML ``.nan``/``.inf``, JSON ``NaN``/
``Infinity`` and booleans are refused naming the field; the error description is strict JSON."""

from __future__ import annotations

import json

import pytest
import yaml

from core.models.errors import json_safe
from policies.budget import BudgetAlert
from scheduler.daemon_config import BudgetConfig, ConfigError, load_budget_config
from scheduler.services.jobs import SpecError, parse_spec

BASE = {"name": "train", "command": "python train.py"}

NON_FINITE = [
    ("budget_usd", "budget_usd: .nan"),
    ("budget_usd", "budget_usd: .inf"),
    ("expected_hours", "expected_hours: .nan"),
    ("max_price_usd_per_hour", "max_price_usd_per_hour: .inf"),
    ("max_interruption_risk", "max_interruption_risk: .nan"),
    ("resources.min_vram_gib", "resources: {min_vram_gib: .nan}"),
    ("resources.min_memory_gib", "resources: {min_memory_gib: .inf}"),
    ("checkpoint.grace_s", "checkpoint: {grace_s: .nan}"),
    ("checkpoint.sync_interval_s", "checkpoint: {sync_interval_s: .inf}"),
]


@pytest.mark.parametrize("field,line", NON_FINITE, ids=[f"{f}-{l[-4:]}" for f, l in NON_FINITE])
def test_non_finite_numbers_are_refused_naming_the_field(field, line):
    raw = {**BASE, **yaml.safe_load(line)}
    with pytest.raises(SpecError) as caught:
        parse_spec(raw)
    [problem] = caught.value.problems
    assert problem["field"] == field and "finite" in problem["problem"]
    json.dumps(caught.value.problems, allow_nan=False)  # the API can always write it


BOOLEANS = ["budget_usd", "expected_hours", "max_price_usd_per_hour", "max_interruption_risk",
            "max_failures"]


@pytest.mark.parametrize("field", BOOLEANS)
def test_booleans_are_not_numbers(field):
    with pytest.raises(SpecError) as caught:
        parse_spec({**BASE, field: True})
    assert [p["field"] for p in caught.value.problems] == [field]


@pytest.mark.parametrize("field", ["gpu_count", "min_vram_gib", "min_vcpus"])
def test_booleans_are_not_resource_numbers(field):
    with pytest.raises(SpecError) as caught:
        parse_spec({**BASE, "resources": {field: True}})
    assert [p["field"] for p in caught.value.problems] == [f"resources.{field}"]


def test_ints_are_still_fine_for_floats():
    spec = parse_spec({**BASE, "budget_usd": 5, "expected_hours": 2,
                       "resources": {"min_vram_gib": 16}, "checkpoint": {"grace_s": 10}})
    assert spec.budget_usd == 5.0 and isinstance(spec.budget_usd, float)
    assert spec.resources.min_vram_gib == 16.0


@pytest.mark.parametrize("usd", [float("nan"), float("inf"), True])
def test_config_budgets_refuse_non_finite_and_booleans(tmp_path, usd):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"budgets": {"alice": usd}}))  # .nan, .inf, true
    with pytest.raises(ConfigError, match="budgets.alice"):
        load_budget_config(path, env={})
    assert BudgetConfig.model_validate({"budgets": {"alice": 500}}).budgets == {"alice": 500.0}


def test_json_safe_turns_non_finite_floats_into_text_at_any_depth():
    value = {"a": float("nan"), "b": [1.5, float("-inf"), {"c": float("inf")}], "d": "x"}
    assert json_safe(value) == {"a": "nan", "b": [1.5, "-inf", {"c": "inf"}], "d": "x"}


def test_a_budget_alert_of_a_job_that_never_ran_does_not_say_checkpointing():
    alert = BudgetAlert(0, "user", 1.0, 2.5, 2.0)
    assert alert.message().endswith("checkpointing and stopping")
    assert alert.message(ran=False) == ("user budget at 100 %: $2.50 of $2.00; stopping (the "
                                        "job never ran)")

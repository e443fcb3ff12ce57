"""YAML as people write it: exponent floats without a dot or a signed exponent are numbers."""

import pytest
import yaml

from core import yaml_files


@pytest.mark.parametrize(("text", "value"), [
    ("1e8", 1e8), ("3.0e8", 3e8), ("-2E-3", -0.002), ("1_000e3", 1e6), (".5e2", 50.0),
    ("3.0e+8", 3e8), ("1.5", 1.5), ("7", 7),
])
def test_numbers(text, value):
    loaded = yaml_files.load(f"x: {text}")["x"]
    assert loaded == value and type(loaded) is type(value)


@pytest.mark.parametrize("text", ["x1e8", "'1e8'", "1e", "e8", "1e8x", "0x1e8"])
def test_not_numbers_stay_as_yaml_reads_them(text):
    assert yaml_files.load(f"x: {text}") == yaml.safe_load(f"x: {text}")


def test_unsafe_tags_are_refused():
    with pytest.raises(yaml.YAMLError):
        yaml_files.load("x: !!python/object/apply:os.system ['true']")


def test_a_spec_with_work_in_exponent_form_is_accepted(tmp_path):
    from core.models import JobSpec
    from scheduler.cli.bundle import load_spec_file

    path = tmp_path / "job.yaml"
    path.write_text("name: a\ncommand: 'true'\nwork: {unit: tokens, total: 3.0e8}\n")
    assert JobSpec.model_validate(load_spec_file(path)).work.total == 3e8

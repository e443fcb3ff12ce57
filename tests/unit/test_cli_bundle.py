from scheduler.cli.bundle import load_spec_file
from scheduler.models import JobSpec


def test_unquoted_yaml_timestamps_become_iso_strings(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: a\ncommand: run\ndeadline: 2026-12-01T18:00:00Z\n")
    raw = load_spec_file(path)
    assert raw["deadline"] == "2026-12-01T18:00:00+00:00"
    assert JobSpec.model_validate(raw).deadline.hour == 18
    path.write_text("name: a\ncommand: run\ndeadline: 2026-12-01 18:00:00\n")
    assert load_spec_file(path)["deadline"] == "2026-12-01T18:00:00"  # naive: refused later

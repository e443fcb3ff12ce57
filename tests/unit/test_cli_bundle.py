from scheduler.cli.bundle import load_spec_file
from core.models import JobSpec


def test_unquoted_yaml_timestamps_become_iso_strings(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: a\ncommand: run\ndeadline: 2026-12-01T18:00:00Z\n")
    raw = load_spec_file(path)
    assert raw["deadline"] == "2026-12-01T18:00:00+00:00"
    assert JobSpec.model_validate(raw).deadline.hour == 18
    path.write_text("name: a\ncommand: run\ndeadline: 2026-12-01 18:00:00\n")
    assert load_spec_file(path)["deadline"] == "2026-12-01T18:00:00"  # naive: refused later


def test_packing_stops_at_the_first_bundle_limit_and_names_workdir(tmp_path, monkeypatch):
    import pytest

    import scheduler.cli.bundle as bundle
    from scheduler.cli.client import CliError

    for i in range(6):
        (tmp_path / f"f{i}.txt").write_bytes(b"x" * 3000)
    assert bundle.pack_workdir(str(tmp_path))  # within the real limits
    for name, value, shown in [("BUNDLE_MAX_MEMBERS", 3, "3 files"),
                               ("BUNDLE_MAX_UNPACKED_BYTES", 8000, "0 MiB unpacked")]:
        with monkeypatch.context() as patch:
            patch.setattr(bundle, name, value)
            with pytest.raises(CliError) as caught:
                bundle.pack_workdir(str(tmp_path))
        message = str(caught.value)
        assert message.startswith(f"workdir: {tmp_path} is over the limits") and shown in message
        assert "before stopping" in message and "f0.txt" in message

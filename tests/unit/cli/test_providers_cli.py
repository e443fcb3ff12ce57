"""``schedctl providers check`` says which provider names an entry had to give up."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from scheduler.cli import app as cli_app
from scheduler.cli.main import app
from core.config import examples_dir

GCP_CSV = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,"
           "SpotPrice,Region,AvailabilityZone\n"
           "n1-standard-4,T4,1,4,15,,0.54,0.18,us-central1,us-central1-a\n")


def test_check_names_the_renamed_imitation(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_app.console, "width", 400)  # one line per row
    (tmp_path / "vms.csv").write_text(GCP_CSV)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"providers": [
        {"kind": "replay", "market": str(examples_dir() / "market.yaml")},
        {"kind": "catalog", "catalogs": [{"provider": "gcp", "path": "vms.csv"}]}]}))
    result = CliRunner().invoke(app, ["providers", "check", "--config", str(config),
                                      "--home", str(tmp_path / "home")],
                                terminal_width=400)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "its gcp offers are listed as gcp-replay (a real source serves gcp)" in out

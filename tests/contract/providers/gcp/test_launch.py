"""Pure GCP launch translation (providers/gcp/launch.py): the insert body beside the
assembled Spot example, labels under GCP's rules, deterministic names, and the startup script
run against a local metadata server."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.models import TAG_ATTEMPT, TAG_JOB, TAG_OWNER, Market, Offer
from providers.gcp.launch import (
    TAGS_KEY,
    TOKEN_KEY,
    insert_body,
    instance_name,
    label_text,
    labels,
    render_startup_script,
    request_id,
)
from providers.gcp.settings import GcpLaunchSettings
from tests.contract.providers.gcp.data import example

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
SECRET = "agent-token-0123456789abcdef"
NAME_RE = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"


def offer(instance_type: str = "g2-standard-4", market: Market = Market.SPOT) -> Offer:
    return Offer(provider="gcp", region="us-central1", zone="us-central1-a",
                 instance_type=instance_type, market=market, gpu_model="L4", gpu_count=1,
                 vram_gib=24, vcpus=4, memory_gib=16, price_usd_per_hour=0.3, observed_at=T0)


def test_labels_follow_gcp_rules() -> None:
    tags = {TAG_OWNER: "GA-Owner.Team@Example", TAG_JOB: "charlm-3f2a1b", TAG_ATTEMPT: "2",
            "9lives": "x" * 80}
    out = labels(tags)
    assert out == {"gpu_arbiter_owner": "ga-owner_team_example", "gpu_arbiter_job": "charlm-3f2a1b",
                   "gpu_arbiter_attempt": "2", "k9lives": "x" * 63}
    assert all(len(k) <= 63 and len(v) <= 63 for k, v in out.items())
    assert label_text("Émile", key=False) == "_mile"
    with pytest.raises(ValueError, match="taken"):
        labels({"a:b": "1", "a_b": "2"})
    with pytest.raises(ValueError, match="empty"):
        labels({"": "1"})
    with pytest.raises(ValueError, match="64"):
        labels({f"k{i}": "v" for i in range(65)})


def test_names_are_valid_deterministic_and_distinct() -> None:
    import re

    for token in ("job-1-1", "Job_1.1", "x" * 64, "---", "j" * 60 + "-1"):
        name = instance_name(token)
        assert re.match(NAME_RE, name) and len(name) <= 63, name
        assert name == instance_name(token)
    assert instance_name("job-1-1") != instance_name("JOB-1-1")  # same slug, other hash
    assert instance_name("job-1-1").startswith("ga-job-1-1-")
    assert request_id("job-1-1") == request_id("job-1-1") != request_id("job-1-2")


def test_spot_body_beside_the_assembled_example() -> None:
    tags = {TAG_OWNER: "ga-test", TAG_JOB: "job-1"}
    body = insert_body(offer=offer(), client_token="job-1-1", tags=tags,
                       startup_script="#!/bin/bash\n", launch=GcpLaunchSettings())
    assembled = example("instances_insert_spot_gpu_assembled.json")
    assert set(assembled) - set(body) == {"guestAccelerators"}  # G2 brings its L4 itself
    assert body["machineType"] == assembled["machineType"]
    assert body["scheduling"] == {**assembled["scheduling"], "instanceTerminationAction": "DELETE"}
    disk = body["disks"][0]
    assert disk["boot"] and disk["autoDelete"] and disk["initializeParams"]["diskSizeGb"] == "100"
    assert body["networkInterfaces"][0]["accessConfigs"][0]["type"] == "ONE_TO_ONE_NAT"
    assert body["labels"] == {"gpu_arbiter_owner": "ga-test", "gpu_arbiter_job": "job-1"}
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert json.loads(items[TAGS_KEY]) == tags and items[TOKEN_KEY] == "job-1-1"
    assert "serviceAccounts" not in body


def test_n1_gets_its_gpus_and_on_demand_is_standard() -> None:
    launch = GcpLaunchSettings(termination_action="STOP", subnetworks={"us-central1": "ga"},
                               service_account="vm@p.iam.gserviceaccount.com", external_ip=False)
    body = insert_body(offer=offer("n1-standard-8+nvidia-tesla-t4:1", Market.ON_DEMAND),
                       client_token="t", tags={}, startup_script="", launch=launch)
    assert body["machineType"] == "zones/us-central1-a/machineTypes/n1-standard-8"
    assert body["guestAccelerators"] == [{"acceleratorType":
                                          "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
                                          "acceleratorCount": 1}]
    assert body["scheduling"] == {"onHostMaintenance": "TERMINATE", "automaticRestart": False,
                                  "provisioningModel": "STANDARD"}
    assert body["networkInterfaces"] == [{"network": "global/networks/default",
                                          "subnetwork": "regions/us-central1/subnetworks/ga"}]
    assert body["serviceAccounts"][0]["email"] == "vm@p.iam.gserviceaccount.com"
    spot = insert_body(offer=offer(), client_token="t", tags={}, startup_script="", launch=launch)
    assert spot["scheduling"]["instanceTerminationAction"] == "STOP"
    with pytest.raises(ValueError, match="262144"):
        insert_body(offer=offer(), client_token="t", tags={}, startup_script="x" * 262145,
                    launch=launch)


class _Metadata(BaseHTTPRequestHandler):
    name = "ga-job-1-1-0123456789"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        ok = (self.headers.get("Metadata-Flavor") == "Google"
              and self.path == "/computeMetadata/v1/instance/name")
        body = (self.name if ok else "Missing Metadata-Flavor:Google header.").encode()
        self.send_response(200 if ok else 403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def metadata_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], check=False, capture_output=True, timeout=60,
                          env={"PATH": os.environ["PATH"]})


def test_startup_script_reads_the_name_and_bootstraps_once(tmp_path: Path,
                                                           metadata_server: str) -> None:
    base = tmp_path / "ga"
    script = render_startup_script({"GA_AGENT_TOKEN": SECRET, "GA_JOB_ID": "job-1"},
                                   pip_spec=str(tmp_path / "no-such-package"), venv=None,
                                   metadata_url=metadata_server, base_dir=str(base),
                                   supervisor="nohup")
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)
    assert SECRET not in script  # base64-encoded (no plain grep hit; not a secret-keeping measure)
    first = _run(script)
    assert first.returncode != 0  # pip cannot install a missing path: stops after the env file
    env_file = base / "agent.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    env = env_file.read_text()
    for line in ("GA_METADATA_FLAVOR=gcp", f"GA_METADATA_URL={metadata_server}",
                 f"GA_AGENT_TOKEN={SECRET}", f"GA_INSTANCE_ID='{_Metadata.name}'"):
        assert line in env, line
    env_file.unlink()
    again = _run(script)
    assert again.returncode == 0 and not env_file.exists()
    assert "not again" in (base / "bootstrap.log").read_text()

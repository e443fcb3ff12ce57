"""The cloud-init script run in bash against a local Instance Metadata Service that, as
Azure's, answers only requests with ``Metadata: true``: it reads the VM name and writes the
agent's environment with the Azure flavor."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from providers.azure.launch import render_user_data, vm_name

SECRET = "agent-secret-for-the-script"
NAME = vm_name("job-1-1")


class _Imds(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        ok = (self.headers.get("Metadata") == "true" and self.path ==
              "/metadata/instance/compute/name?api-version=2021-02-01&format=text")
        body = (NAME if ok else '{"error": "Bad request. Required metadata header not '
                'specified"}').encode()
        self.send_response(200 if ok else 400)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def imds() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Imds)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_script_reads_the_vm_name_and_writes_the_agent_env(tmp_path: Path, imds: str) -> None:
    base = tmp_path / "ga"
    venv = tmp_path / "venv"  # its python refuses at once: the script stops at the install
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    (venv / "bin" / "python").chmod(0o755)
    script = render_user_data({"GA_AGENT_TOKEN": SECRET, "GA_INSTANCE_ID": "ignored"},
                              pip_spec="gpu-arbiter", venv=str(venv),
                              imds_url=imds, base_dir=str(base), supervisor="nohup")
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)
    run = subprocess.run(["bash", "-c", script], check=False, capture_output=True, timeout=60,
                         env={"PATH": os.environ["PATH"]})
    assert run.returncode != 0  # the install failed, after the env file was written
    env_file = base / "agent.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    env = env_file.read_text()
    for line in ("GA_METADATA_FLAVOR=azure", f"GA_METADATA_URL={imds}",
                 f"GA_AGENT_TOKEN={SECRET}", f"GA_INSTANCE_ID='{NAME}'"):
        assert line in env, line
    assert "ignored" not in env


def test_vm_names_are_deterministic_valid_and_distinct() -> None:
    assert vm_name("job-1-1") == vm_name("job-1-1") != vm_name("job-1-2")
    assert vm_name("Job_1.1") != vm_name("job-1-1")  # the hash covers the exact token
    long = vm_name("x" * 64)
    assert len(long) <= 64 and long.startswith("ga-x")
    for token in ("job-1-1", "--__--", "Ü" * 10, "a" * 64):
        name = vm_name(token)
        assert len(name) <= 64 and name[0].isalnum() and name[-1].isalnum()
        assert all(c.isalnum() or c == "-" for c in name)

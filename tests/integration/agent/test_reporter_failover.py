"""An agent given several daemon replicas keeps reporting when the one it used dies: a real
HTTP server stands for the live replica, a closed port for the dead one."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.models.agents import AgentAction, AgentPhase
from scheduler.agent.reporter import Reporter
from scheduler.agent.settings import AgentSettings
from tests.fixtures.redis_server import free_port


@pytest.fixture
def replica():
    """A live 'replica' answering every report with ``continue``; yields (url, bodies)."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            payload = json.dumps({"action": "continue"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    server.shutdown()
    server.server_close()


def test_reports_fail_over_to_the_next_replica_and_stay_there(replica):
    live, bodies = replica
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    reporter = Reporter(f"{dead}, {live}/", "token", "i-1", "job-1", 1)
    reporter.add_line("hello")
    command = reporter.send(AgentPhase.RUNNING)
    assert command is not None and command.action is AgentAction.CONTINUE
    assert bodies[-1]["log_lines"] == ["hello"]
    assert reporter.send_final(AgentPhase.SUCCEEDED, AgentPhase.RUNNING, exit_code=0)
    assert [b["phase"] for b in bodies] == ["running", "succeeded"]
    assert reporter._urls[reporter._current] == live  # no detour through the dead one again


def test_no_replica_reachable_drops_a_heartbeat_without_raising():
    dead = ",".join(f"http://127.0.0.1:{free_port()}" for _ in range(2))
    assert Reporter(dead, "token", "i-1", "job-1", 1).send(AgentPhase.RUNNING) is None


def test_agent_settings_accept_several_urls_and_name_a_bad_one():
    env = {"GA_API_URL": "http://a:1/, http://b:2", "GA_AGENT_TOKEN": "t", "GA_INSTANCE_ID": "i",
           "GA_JOB_ID": "j", "GA_ATTEMPT": "1", "GA_STORE_URL": "file:///x",
           "GA_JOB_SPEC": json.dumps({"name": "n", "command": "true"})}
    assert AgentSettings.from_env(env).api_url == "http://a:1,http://b:2"
    with pytest.raises(ValueError, match="GA_API_URL.*'b:2'"):
        AgentSettings.from_env({**env, "GA_API_URL": "http://a:1,b:2"})

"""No secret in clear anywhere we write: a daemon runs a job's whole life with fake but
realistic secrets in its environment (cloud keys, the S3 store's keys, the API token, the agent
secret), then the daemon log, the agents' and jobs' logs, the API's answers and every Redis key
and value are scanned for those strings and for an agent token. The API listens on 127.0.0.1
only."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import httpx
import pytest

from providers.replay.provider import ReplayProvider
from core.config import examples_dir
from scheduler.store.agents import AgentTokens
from tests.e2e.harness import TERMINAL, DaemonProcess
from tests.fixtures.waiting import wait_until
from tests.fixtures.redis_server import start_redis
from tests.fixtures.s3_server import start_s3

pytestmark = pytest.mark.e2e
MARKET = examples_dir() / "market.yaml"
JOB_SPEC = examples_dir() / "charlm-job.yaml"
SHORT_RUN = {"CHARLM_SEED": "0", "CHARLM_STEPS": "3000", "CHARLM_CHECKPOINT_EVERY": "1000"}


@pytest.fixture
def setup(tmp_path, monkeypatch):
    redis_server = start_redis(tmp_path / "redis")
    (tmp_path / "weed").mkdir()
    s3 = start_s3(tmp_path / "weed")
    secret_env = {
        **s3.credentials_env(),  # the S3 store's keys, as AWS_* (boto3's standard chain)
        "GA_API_TOKEN": secrets.token_urlsafe(32),
        "GA_AGENT_SECRET": secrets.token_urlsafe(32),
        # Provider credentials a real config would read (the replayed market ignores them).
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": secrets.token_urlsafe(22),
        "GOOGLE_OAUTH_ACCESS_TOKEN": "ya29." + secrets.token_urlsafe(40),
    }
    monkeypatch.setenv("GA_API_TOKEN", secret_env["GA_API_TOKEN"])
    daemon = DaemonProcess(tmp_path / "home", MARKET, env={
        **secret_env, "REDIS_URL": redis_server.url, "GA_STORE_URL": s3.store_url()})
    yield daemon, redis_server, secret_env
    daemon.stop()
    ReplayProvider(MARKET, daemon.home / "replay").shutdown_cloud()
    s3.stop()
    redis_server.stop()


def _redis_dump(client) -> str:
    """Every key and every value, by type (strings, hashes, lists, sets, sorted sets, streams)."""
    out = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        value = {"string": lambda k: client.get(k), "hash": lambda k: client.hgetall(k),
                 "list": lambda k: client.lrange(k, 0, -1), "set": lambda k: client.smembers(k),
                 "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
                 "stream": lambda k: client.xrange(k)}[kind](key)
        out.append(f"{key} {kind} {value!r}")
    assert out
    return "\n".join(out)


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the TCP sockets listening on ``port`` (from /proc/net/tcp{,6})."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_no_secret_in_logs_api_or_redis_and_api_on_loopback(setup):
    daemon, redis_server, secret_env = setup
    daemon.start()
    info = json.loads((daemon.home / "daemon.json").read_text())
    assert info["api_url"].startswith("http://127.0.0.1:")
    assert _listening_addresses(info["port"]) == {"0100007F"}  # 127.0.0.1, no other interface

    job_id = daemon.submit(JOB_SPEC, env=SHORT_RUN)["id"]
    done = wait_until(lambda: (j := daemon.job(job_id))["state"] in TERMINAL and j, 180,
                      "the job to finish", detail=daemon.log_tail)
    assert done["state"] == "succeeded", done["events"]
    secrets_in_clear = {name: value for name, value in secret_env.items()
                        if name != "AWS_EC2_METADATA_DISABLED"}
    tokens = AgentTokens(secret_env["GA_AGENT_SECRET"].encode())
    for attempt in range(1, len(done["placements"]) + 1):
        token = tokens.issue(job_id, attempt)
        secrets_in_clear[f"agent token {attempt}"] = token
        secrets_in_clear[f"agent token {attempt} MAC"] = token.rsplit(".", 1)[1]

    client = daemon.client()
    answers = [client.get(path) for path in (
        "/v1/jobs", f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/logs", "/v1/events",
        "/v1/offers", "/v1/health")]
    metrics = httpx.get(info["api_url"] + "/metrics", timeout=10,
                        headers={"Authorization": f"Bearer {secret_env['GA_API_TOKEN']}"})
    assert metrics.status_code == 200
    answers.append(metrics.text)
    daemon.stop()  # its last log lines (shutdown) are scanned too
    places = {
        "the API's answers": json.dumps(answers),
        "Redis": _redis_dump(redis_server.client()),
    }
    for path in sorted(daemon.home.rglob("*.log")):  # daemon, replay cloud, agents, jobs
        places[str(path.relative_to(daemon.home))] = path.read_text(errors="replace")
    assert any("agent.log" in p for p in places) and any("job.log" in p for p in places)
    leaks = [(name, where) for name, value in secrets_in_clear.items()
             for where, text in places.items() if value in text]
    assert not leaks, leaks

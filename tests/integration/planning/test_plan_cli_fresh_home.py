"""``schedctl plan examples/charlm-job.yaml`` on a fresh install: no daemon ever ran with this
GA_HOME (no offers in its Redis, no replay cloud state). It plans on the embedded default's
example market, listed from the market file without starting its cloud, and recommends the
offer a daemon started now would take. Real ``schedctl`` processes, the embedded Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from core.config import REPO_ROOT
from scheduler.store.connection import EmbeddedRedis

JOB = REPO_ROOT / "examples" / "charlm-job.yaml"


def _plan(home, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GA_HOME": str(home), "COLUMNS": "120"}
    for name in ("REDIS_URL", "GA_STORE_URL", "GA_EXAMPLES_DIR"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "scheduler.cli.main", "plan", str(JOB), *args],
                          check=False, env=env, capture_output=True, text=True, timeout=120)


def test_plan_before_any_daemon_recommends_an_offer(tmp_path):
    home = tmp_path / "home"
    shown = _plan(home)
    assert shown.returncode == 0, shown.stderr
    assert "no offer fits" not in shown.stdout and "the market has no offers" not in shown.stdout
    assert "listed now by the configured providers (no daemon running)" in " ".join(shown.stdout.split())
    result = _plan(home, "--format", "json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    policy = body["scenarios"]["policy"]
    # The example market's cheapest eligible offer with 16 GiB (see examples/market.yaml).
    assert policy["series"] == "aws/us-east-1/us-east-1a/g4dn.xlarge/spot"
    assert "spot pays" in policy["reason"] and policy["cost_usd"]["expected"] > 0
    assert body["eligible"] > 1 and body["offers_problems"] == []
    # Nothing was started or left behind: no replay cloud (its clock starts with the first
    # daemon), and the embedded Redis the command started is stopped again.
    assert not (home / "replay" / "state.json").exists()
    assert not (home / "replay" / "cloud.json").exists()
    assert not EmbeddedRedis(home / "redis").running()

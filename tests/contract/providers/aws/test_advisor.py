"""The Spot Advisor file: fetched with httpx from a local HTTP server serving the real file,
cached on disk with its age, the cached copy kept when a refetch fails."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from providers.aws.advisor import SPOT_ADVISOR_RETRY_S, SpotAdvisor
from tests.contract.providers.aws.data import ADVISOR_FILE, needs_advisor

pytestmark = needs_advisor


class AdvisorServer:
    """Serves ``body`` at ``/spot-advisor-data.json``; ``status`` other than 200 fails."""

    def __init__(self) -> None:
        self.body = ADVISOR_FILE.read_bytes()
        self.status = 200
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                owner.hits += 1
                body = owner.body if owner.status == 200 else b"nope"
                self.send_response(owner.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/spot-advisor-data.json"


@pytest.fixture
def server() -> Iterator[AdvisorServer]:
    s = AdvisorServer()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_fetch_cache_and_age(server: AdvisorServer, tmp_path: Path) -> None:
    cache = tmp_path / "aws" / "spot-advisor-data.json"
    advisor = SpotAdvisor(server.url, cache, max_age_s=3600)
    assert advisor.cache_age_s() is None
    assert advisor.risks("us-east-1")["p3.2xlarge"] == 0.25
    assert server.hits == 1 and cache.read_bytes() == ADVISOR_FILE.read_bytes()
    assert advisor.cache_age_s() < 5
    assert advisor.risks("eu-west-1") and advisor.risks("nowhere-1") == {}
    assert server.hits == 1  # fresh cache: no refetch
    _age(cache, 7200)
    assert advisor.cache_age_s() == pytest.approx(7200, abs=5)
    advisor.risks("us-east-1")
    assert server.hits == 2 and advisor.cache_age_s() < 5  # stale: fetched again


def test_failed_refetch_keeps_the_cached_copy_and_waits_before_retrying(
        server: AdvisorServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    now = {"t": time.time()}
    cache = tmp_path / "advisor.json"
    advisor = SpotAdvisor(server.url, cache, max_age_s=3600, clock=lambda: now["t"])
    advisor.risks("us-east-1")
    _age(cache, 7200)
    server.status = 503
    assert advisor.risks("us-east-1")["p3.2xlarge"] == 0.25  # stale copy, still used
    assert "keeping the cached copy" in caplog.text
    hits = server.hits
    advisor.risks("us-east-1")
    assert server.hits == hits  # within SPOT_ADVISOR_RETRY_S: no new attempt
    now["t"] += SPOT_ADVISOR_RETRY_S + 1
    server.status = 200
    advisor.risks("us-east-1")
    assert server.hits == hits + 1


def test_no_cache_and_no_server_means_no_risks(tmp_path: Path) -> None:
    advisor = SpotAdvisor("http://127.0.0.1:9/none.json", tmp_path / "a.json")
    assert advisor.risks("us-east-1") == {} and advisor.cache_age_s() is None


def test_something_else_is_never_cached(server: AdvisorServer, tmp_path: Path) -> None:
    server.body = b'{"ranges": []}'
    advisor = SpotAdvisor(server.url, tmp_path / "a.json")
    assert advisor.risks("us-east-1") == {} and not (tmp_path / "a.json").exists()


def test_file_urls(tmp_path: Path) -> None:
    advisor = SpotAdvisor(ADVISOR_FILE.as_uri(), tmp_path / "a.json")
    assert advisor.refresh() and advisor.risks("ap-northeast-1")

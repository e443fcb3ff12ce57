"""Times out of range (``300000y`` ago, a year-1 time east of UTC, a 16 KiB number) are a 422
naming the parameter on every route that reads one, and a clear CLI error with exit code 2,
never an ``OverflowError`` (a 500, or a traceback)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from scheduler.api.app import create_app
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.cli.main import app as cli
from scheduler.services.history import QueryError, parse_when
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.integration.cli.conftest import served  # noqa: F401  (the API on a real port)

TOKEN = "bad-times-token"
SPEC = {"name": "t", "command": "true"}
OUT_OF_RANGE = ["300000y", "999999999y", "9" * 4000 + "d", "0001-01-01T00:00+01:00",
                "9999-12-31T23:59-01:00", "1969-12-31"]


@pytest.fixture
def client(redis_client, tmp_path):
    app = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "objects"),
                     AgentTokens(b"secret"), TOKEN)
    return TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})


IDS = [t if len(t) < 30 else f"{len(t)} digits" for t in OUT_OF_RANGE]


@pytest.mark.parametrize("text", OUT_OF_RANGE, ids=IDS)
def test_parse_when_refuses_times_out_of_range_naming_the_field(text):
    with pytest.raises(QueryError) as caught:
        parse_when(text, "since")
    assert caught.value.field == "since" and "out of range" in str(caught.value)
    assert len(str(caught.value)) < 200  # a 4,000-digit input is not echoed whole


@pytest.mark.parametrize("text", OUT_OF_RANGE, ids=IDS)
@pytest.mark.parametrize("method,path,field", [
    ("GET", "/v1/history", "since"), ("GET", "/v1/history", "until"),
    ("GET", "/v1/history/points", "since"), ("GET", "/v1/offers", "at"),
    ("GET", "/v1/cost-report", "since"), ("POST", "/v1/plans", "lookback"),
])
def test_every_route_reading_a_time_answers_422_naming_it(client, method, path, field, text):
    if method == "GET":
        params = {field: text, **({"series": "aws/r/z/t/spot"} if "points" in path else {})}
        answer = client.get(path, params=params)
    else:
        answer = client.post(path, json={"spec": SPEC, field: text})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith(f"{field}: ") and "out of range" in answer.text


@pytest.mark.parametrize("args,field", [
    (["history", "--since", "300000y"], "since"),
    (["history", "--until", "0001-01-01T00:00+01:00"], "until"),
    (["offers", "--at", "999999999y"], "at"),
    (["cost-report", "--since", "300000y"], "since"),
])
def test_cli_says_out_of_range_and_exits_2(monkeypatch, served, args, field):  # noqa: F811
    """The CLI against the served API: the 422 above, said as one line naming the field."""
    monkeypatch.setenv("GA_HOME", str(served.home))
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"{field}: got" in result.output and "out of range" in result.output
    assert "Traceback" not in result.output

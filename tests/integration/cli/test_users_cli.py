"""``schedctl users``, ``tokens``, ``whoami`` and ``audit`` against the real API on a real port
over a real Redis: the served daemon's token is the bootstrap admin's; a token created by the
CLI is sent through ``GA_API_TOKEN``, as a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from typer.testing import CliRunner

from scheduler.cli.main import app as cli
from tests.integration.cli.conftest import TOKEN, line_reader


def _run(served, *args: str, token: str | None = None):
    env = {"COLUMNS": "160"}
    if token is not None:
        env["GA_API_TOKEN"] = token
    return CliRunner().invoke(cli, [*args, "--home", str(served.home)], env=env,
                              catch_exceptions=False)


def _ok(served, *args: str, token: str | None = None):
    result = _run(served, *args, token=token)
    assert result.exit_code == 0, result.output
    return result


def _refused(served, *args: str, token: str | None = None) -> str:
    """The error line of a refused command (exit 2, ``error: ...`` on stderr)."""
    result = _run(served, *args, token=token)
    assert result.exit_code == 2, result.output
    assert result.stdout == "", result.stdout
    return " ".join(result.stderr.split())


def _new_token(served, user: str, label: str = "") -> tuple[str, str]:
    """``tokens create --user USER``: (the token, stderr's note)."""
    result = _ok(served, "tokens", "create", "--user", user, "--label", label)
    token = result.stdout.strip()
    assert result.stdout == token + "\n", result.stdout  # the token alone on stdout
    return token, result.stderr


def test_an_admin_adds_a_user_whose_new_token_is_theirs_until_revoked(served):
    out = _ok(served, "users", "add", "alice", "--budget", "50").stdout
    assert "added user alice (user, budget $50.00)" in out
    assert "schedctl tokens create --user alice" in out
    assert "already exists" in _refused(served, "users", "add", "alice")
    _ok(served, "users", "add", "ops", "--admin")

    users = json.loads(_ok(served, "users", "list", "--format", "json").stdout)
    by_name = {u["name"]: u for u in users}
    assert set(by_name) == {"admin", "alice", "ops"}
    assert by_name["alice"]["role"] == "user" and by_name["alice"]["budget_usd"] == 50
    assert by_name["ops"]["role"] == "admin" and by_name["ops"]["budget_usd"] is None
    table = _ok(served, "users", "list").stdout
    alice_row = next(line for line in table.splitlines() if line.startswith("alice"))
    assert alice_row.split()[:4] == ["alice", "user", "$50.00", "$0.0000"]

    token, note = _new_token(served, "alice", "laptop")
    assert token.startswith("gat_")
    token_id = token.split("_")[1]
    assert "shown only now" in note and f"GA_API_TOKEN={token} schedctl whoami" in note
    assert f"schedctl tokens revoke {token_id}" in note

    me = _ok(served, "whoami", token=token).stdout
    assert f"alice (user), token {token_id}" in me and "budget $50.00" in me
    assert "GA_API_TOKEN" in me  # where the token came from
    me_json = json.loads(_ok(served, "whoami", "--json", token=token).stdout)
    assert me_json["user"] == "alice" and me_json["role"] == "user"
    assert me_json["token_id"] == token_id and me_json["budget_usd"] == 50
    admin_me = json.loads(_ok(served, "whoami", "--json").stdout)
    assert admin_me["user"] == "admin" and admin_me["role"] == "admin"

    # A plain user may not manage users.
    assert _refused(served, "users", "add", "mallory", token=token) \
        == "error: this needs an admin token"
    assert _refused(served, "users", "list", token=token) == "error: this needs an admin token"

    # The token itself is never listed again, only its id.
    listed = _ok(served, "tokens", "list").stdout
    assert token_id in listed and "laptop" in listed and token not in listed
    assert token.split("_", 2)[2] not in listed
    records = json.loads(_ok(served, "tokens", "list", "--user", "alice", "--format", "json")
                         .stdout)
    assert [(r["id"], r["user"], r["label"], r["revoked_at"]) for r in records] \
        == [(token_id, "alice", "laptop", None)]
    assert token.split("_", 2)[2] not in json.dumps(records)
    csv_out = _ok(served, "tokens", "list", "--format", "csv").stdout
    assert csv_out.splitlines()[0].split(",")[:2] == ["id", "user"]
    assert token.split("_", 2)[2] not in csv_out

    out = _ok(served, "tokens", "revoke", token_id).stdout
    assert f"token {token_id} of user alice revoked" in out
    refused = _refused(served, "whoami", token=token)
    assert refused.startswith("error: missing, invalid or revoked token")
    assert "GA_API_TOKEN" in refused  # says which token the CLI sent
    revoked = json.loads(_ok(served, "tokens", "list", "--format", "json").stdout)
    assert next(r for r in revoked if r["id"] == token_id)["revoked_at"] is not None
    assert "revoked" in _ok(served, "tokens", "list", "--user", "alice").stdout

    # The audit stream has each state-changing request: who, what, its status.
    entries = [json.loads(line) for line in
               _ok(served, "audit", "--json", "--limit", "1000").stdout.splitlines()]
    seen = [(e["user"] if e.get("user") else None, e["method"], e["path"], e["status"])
            for e in entries]
    assert ("admin", "POST", "/v1/users", 201) in seen
    assert ("admin", "POST", "/v1/users", 409) in seen
    assert ("alice", "POST", "/v1/users", 403) in seen
    assert ("admin", "POST", "/v1/tokens", 201) in seen
    assert ("admin", "POST", f"/v1/tokens/{token_id}/revoke", 200) in seen
    assert not any(e["method"] == "GET" for e in entries)
    assert all(e["via"] == "bearer" and e["client"] for e in entries if e.get("user"))
    alice_only = _ok(served, "audit", "--user", "alice").stdout
    assert "POST /v1/users" in alice_only and "403" in alice_only
    assert "/v1/tokens" not in alice_only
    # Paging: --after an entry's id gives the entries after it.
    rest = [json.loads(line) for line in
            _ok(served, "audit", "--json", "--after", entries[0]["id"]).stdout.splitlines()]
    assert [e["id"] for e in rest] == [e["id"] for e in entries[1:]]


def test_a_user_manages_their_own_tokens_only(served):
    _ok(served, "users", "add", "alice")
    _ok(served, "users", "add", "bob")
    alice, _ = _new_token(served, "alice")
    bob, _ = _new_token(served, "bob")

    # Without --user a token is the caller's own.
    result = _ok(served, "tokens", "create", "--label", "ci", "--json", token=alice)
    created = json.loads(result.stdout)
    assert created["user"] == "alice" and created["label"] == "ci"
    assert created["token"].startswith(f"gat_{created['id']}_")
    assert json.loads(_ok(served, "whoami", "--json", token=created["token"]).stdout)["user"] \
        == "alice"

    mine = json.loads(_ok(served, "tokens", "list", "--format", "json", token=alice).stdout)
    assert {r["user"] for r in mine} == {"alice"} and len(mine) == 2
    refused = _refused(served, "tokens", "create", "--user", "bob", token=alice)
    assert "admin" in refused
    bob_id = bob.split("_")[1]
    _refused(served, "tokens", "revoke", bob_id, token=alice)
    assert _ok(served, "whoami", token=bob).stdout.startswith("bob (user)")
    # The user revokes their own second token; the first still works.
    _ok(served, "tokens", "revoke", created["id"], token=alice)
    _refused(served, "whoami", token=created["token"])
    _ok(served, "whoami", token=alice)
    assert _refused(served, "audit", token=alice) == "error: this needs an admin token"


def test_users_set_changes_the_budget_and_role_and_names_what_is_wrong(served):
    _ok(served, "users", "add", "alice", "--budget", "50")
    assert "alice (user, budget $10.00)" in _ok(served, "users", "set", "alice", "--budget",
                                                "10").stdout
    assert "alice (user, no per-user budget)" in _ok(served, "users", "set", "alice",
                                                     "--no-budget").stdout
    changed = json.loads(_ok(served, "users", "set", "alice", "--admin", "--budget", "5",
                             "--json").stdout)
    assert changed["role"] == "admin" and changed["budget_usd"] == 5
    assert "alice (user, budget $5.00)" in _ok(served, "users", "set", "alice",
                                               "--no-admin").stdout
    users = json.loads(_ok(served, "users", "list", "--format", "json").stdout)
    assert next(u for u in users if u["name"] == "alice")["budget_usd"] == 5

    assert "nothing to change" in _refused(served, "users", "set", "alice")
    assert "--budget and --no-budget" in _refused(served, "users", "set", "alice", "--budget",
                                                  "3", "--no-budget")
    assert "no user 'bob'" in _refused(served, "users", "set", "bob", "--budget", "3")
    # The API's budget_usd is named as the flag typed.
    assert _refused(served, "users", "set", "alice", "--budget", "-1") \
        == "error: --budget: must be a number of USD above 0 (and below 1e12)"
    assert _refused(served, "users", "add", "carol", "--budget", "0").startswith(
        "error: --budget: must be a number of USD above 0")
    assert _refused(served, "users", "add", "carol", "--budget", "nan").startswith(
        "error: --budget: ")
    assert _refused(served, "users", "add", "Not A Name").startswith(
        "error: name: must be 1-63 lowercase letters")
    assert "carol" not in _ok(served, "users", "list").stdout
    assert _refused(served, "users", "set", "admin", "--no-admin") \
        == "error: admin: 'admin' is the last admin; make another user an admin first"


def test_audit_follow_prints_new_entries_as_they_come_and_stops_on_ctrl_c(served):
    _ok(served, "users", "add", "alice")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(GA_HOME=str(served.home), COLUMNS="160")
    env.pop("GA_API_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "scheduler.cli.main", "audit", "--follow"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = line_reader(proc.stdout)
    try:
        first = lines.get(timeout=30)
        assert first is not None and "admin POST /v1/users 201" in first
        _ok(served, "users", "add", "bob")
        _ok(served, "users", "set", "bob", "--budget", "7")
        later = [lines.get(timeout=30), lines.get(timeout=30)]
        assert "admin POST /v1/users 201" in later[0]
        assert "admin PATCH /v1/users/bob 200" in later[1]
        assert "via bearer" in later[1]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert TOKEN not in "".join(later)

"""Users, their API tokens and the audit stream, through the daemon's API
(:mod:`scheduler.api.users`): ``users add|list|set``, ``tokens create|list|revoke``,
``whoami`` and ``audit``.

Admin commands (``users ...``, ``audit``, tokens of another user) need an admin token: the
daemon's own token (``GA_HOME/api-token``) is one. Any user may create, list and revoke their
own tokens and ask ``whoami``. Which token the CLI sends: ``GA_API_TOKEN`` when set, else
``GA_HOME/api-token``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import typer
from rich.text import Text

from scheduler.cli.app import HomeOption, app, client, console, err, fail, print_error
from scheduler.cli.client import ApiClient, CliError
from scheduler.cli.formats import check_format, emit
from scheduler.cli.render import Column, fitted_table
from scheduler.cli.render.tables import usd, usd_cents
from scheduler.timing import AUDIT_FOLLOW_POLL_S

# ``audit --follow`` asks for new entries this often (the API answers at once, it does not
# long-poll); an entry is on screen at most this late.
# ``audit --follow`` reads at most this many entries per poll (the API's cap), so a burst
# never makes one huge answer; the rest come on the next polls.
AUDIT_FOLLOW_PAGE = 1000

users_app = typer.Typer(help="Users: who may use the daemon, their role and budget (admin).",
                        no_args_is_help=True)
tokens_app = typer.Typer(help="API tokens: create one for a user, list, revoke.",
                         no_args_is_help=True)
app.add_typer(users_app, name="users")
app.add_typer(tokens_app, name="tokens")

JsonOption = typer.Option(False, "--json", help="print the API's JSON answer")
FormatOption = typer.Option("table", "--format", help="table, json or csv")


def _when(iso: str | None) -> str:
    """``2026-12-01 22:35:42`` (UTC, as the API stores it); ``-`` for none."""
    return "-" if not iso else iso[:19].replace("T", " ")


def _budget(value: float | None) -> str:
    """A budget in dollars and cents (``$50.00``); ``-`` for none."""
    return usd(value, 2)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _user_line(user: dict[str, Any]) -> str:
    return f"{user['name']} ({user['role']}, {_budget_words(user.get('budget_usd'))})"


def _budget_words(value: float | None) -> str:
    return "no per-user budget" if value is None else f"budget {_budget(value)}"


def _fail_naming_flags(exc: CliError) -> NoReturn:
    """:func:`fail`, the API's ``budget_usd`` named as the ``--budget`` the user typed."""
    message = str(exc)
    if message.startswith("budget_usd:"):
        exc = CliError("--budget" + message[len("budget_usd"):], exc.problems)
    fail(exc)


def _patch(api: ApiClient, path: str, body: dict[str, Any]) -> Any:
    # As ApiClient.post: a NaN or infinite --budget goes as JSON's NaN token, so the daemon
    # refuses it naming the field (httpx would raise before sending).
    return api.request("PATCH", path, content=json.dumps(body, allow_nan=True),
                       headers={"Content-Type": "application/json"})


# users
@users_app.command("add")
def users_add(name: str = typer.Argument(..., help="user name: lowercase letters, digits, "
                                                   "'.', '_', '-' (a job's owner)"),
              admin: bool = typer.Option(False, "--admin", help="may do everything (default: "
                                                                "own jobs only)"),
              budget: float | None = typer.Option(None, "--budget", metavar="USD",
                                                  help="spending limit over all their jobs"),
              as_json: bool = JsonOption, home: Path | None = HomeOption) -> None:
    """Add a user (admin). They get no token yet: create one with `schedctl tokens create`."""
    try:
        user = client(home).post("/v1/users", json={"name": name, "admin": admin,
                                                    "budget_usd": budget})
    except CliError as exc:
        _fail_naming_flags(exc)
    if as_json:
        _print_json(user)
        return
    console.print(f"added user {_user_line(user)}", markup=False, highlight=False)
    console.print(f"give them a token: schedctl tokens create --user {user['name']}",
                  markup=False, highlight=False)


def users_table(users: list[dict[str, Any]], width: int | None = None):
    """``GET /v1/users``, one row each: name, role, budget (over all their jobs; ``-``: none
    of their own) and spent (USD), created (UTC)."""
    cols = [Column("name", "left"), Column("role", "left"), Column("budget"),
            Column("spent"), Column("created", drop=1)]
    rows = [[u["name"], Text(u["role"], style="bold" if u["role"] == "admin" else ""),
             _budget(u.get("budget_usd")), usd_cents(u.get("spent_usd")),
             _when(u.get("created_at"))] for u in users]
    return fitted_table("users", cols, rows, width)


@users_app.command("list")
def users_list(fmt: str = FormatOption, home: Path | None = HomeOption) -> None:
    """Users (admin): role, budget, spent so far, created."""
    check_format(fmt)
    try:
        users = client(home).get("/v1/users")
    except CliError as exc:
        fail(exc)
    emit(users, fmt, users, lambda: users_table(users))


@users_app.command("set")
def users_set(name: str = typer.Argument(..., help="the user's name"),
              budget: float | None = typer.Option(None, "--budget", metavar="USD",
                                                  help="new spending limit over all their jobs"),
              no_budget: bool = typer.Option(False, "--no-budget",
                                             help="remove their per-user budget"),
              admin: bool | None = typer.Option(None, "--admin/--no-admin",
                                                help="make them an admin, or a plain user"),
              as_json: bool = JsonOption, home: Path | None = HomeOption) -> None:
    """Change a user's budget or role (admin)."""
    if budget is not None and no_budget:
        print_error("--budget and --no-budget: give one of them")
        raise typer.Exit(2)
    body: dict[str, Any] = {}
    if budget is not None or no_budget:
        body["budget_usd"] = budget
    if admin is not None:
        body["admin"] = admin
    if not body:
        print_error("nothing to change: give --budget USD, --no-budget, --admin or --no-admin")
        raise typer.Exit(2)
    try:
        user = _patch(client(home), f"/v1/users/{quote(name, safe='')}", body)
    except CliError as exc:
        _fail_naming_flags(exc)
    if as_json:
        _print_json(user)
        return
    console.print(f"user {_user_line(user)}", markup=False, highlight=False)


# tokens
@tokens_app.command("create")
def tokens_create(user: str | None = typer.Option(None, "--user", help="whose token (admin "
                                                                       "only; default: yours)"),
                  label: str = typer.Option("", "--label", help="what it is for, shown in "
                                                                "`tokens list`"),
                  as_json: bool = JsonOption, home: Path | None = HomeOption) -> None:
    """Create an API token. It is printed once: the daemon keeps only its hash."""
    body: dict[str, Any] = {"label": label}
    if user is not None:
        body["user"] = user
    try:
        created = client(home).post("/v1/tokens", json=body)
    except CliError as exc:
        fail(exc)
    if as_json:
        _print_json(created)
        return
    # The token alone on stdout (never folded), the explanation on stderr, so
    # `TOKEN=$(schedctl tokens create ...)` captures just the token.
    typer.echo(created["token"])
    label_part = f", label {created['label']!r}" if created.get("label") else ""
    err.print(f"token {created['id']} for user {created['user']}{label_part}.\n"
              "It is shown only now: the daemon stores only its hash. Use it with\n"
              f"  GA_API_TOKEN={created['token']} schedctl whoami\n"
              f"and revoke it with: schedctl tokens revoke {created['id']}",
              markup=False, highlight=False, soft_wrap=True)


def tokens_table(records: list[dict[str, Any]], width: int | None = None):
    """``GET /v1/tokens``, one row each: id (what `tokens revoke` takes), user, state (active
    or revoked), label, created and revoked (UTC). Never the token itself."""
    # The label (what a token is for) tells tokens apart better than when they were made.
    cols = [Column("id", "left"), Column("user", "left"), Column("state", "left"),
            Column("label", "left", drop=1, wrap=True), Column("created", drop=2),
            Column("revoked", drop=3)]
    rows = [[r["id"], r["user"],
             Text("revoked", style="dim") if r.get("revoked_at") else Text("active", "green"),
             r.get("label") or "-", _when(r.get("created_at")), _when(r.get("revoked_at"))]
            for r in records]
    return fitted_table("API tokens", cols, rows, width)


@tokens_app.command("list")
def tokens_list(user: str | None = typer.Option(None, "--user", help="only this user's "
                                                                     "(default: all you may see)"),
                fmt: str = FormatOption, home: Path | None = HomeOption) -> None:
    """Tokens (yours; an admin sees everyone's): id, user, state, created, label."""
    check_format(fmt)
    try:
        records = client(home).get("/v1/tokens", user=user)
    except CliError as exc:
        fail(exc)
    emit(records, fmt, records, lambda: tokens_table(records))


@tokens_app.command("revoke")
def tokens_revoke(token_id: str = typer.Argument(..., metavar="ID",
                                                 help="the token's id, from `tokens list`"),
                  as_json: bool = JsonOption, home: Path | None = HomeOption) -> None:
    """Revoke a token: every replica refuses it from now on."""
    try:
        record = client(home).post(f"/v1/tokens/{quote(token_id, safe='')}/revoke")
    except CliError as exc:
        fail(exc)
    if as_json:
        _print_json(record)
        return
    console.print(f"token {record['id']} of user {record['user']} revoked "
                  f"({_when(record.get('revoked_at'))} UTC)", markup=False, highlight=False)


# whoami
@app.command()
def whoami(as_json: bool = JsonOption, home: Path | None = HomeOption) -> None:
    """Who the CLI's token is: user, role, token id, budget and spent."""
    try:
        api = client(home)
        me = api.get("/v1/me")
    except CliError as exc:
        fail(exc)
    if as_json:
        _print_json(me)
        return
    console.print(f"{me['user']} ({me['role']}), token {me['token_id']}\n"
                  f"spent {usd_cents(me.get('spent_usd'))}, {_budget_words(me.get('budget_usd'))}\n"
                  f"the CLI sends {api.token_source}", markup=False, highlight=False)


# audit
def audit_table(entries: list[dict[str, Any]], width: int | None = None):
    """``GET /v1/audit`` entries, oldest first: when (UTC), user, method and path, status,
    client address, token id, via (bearer, cookie or none)."""
    cols = [Column("at", "left"), Column("user", "left"), Column("request", "left", wrap=True),
            Column("status"), Column("client", "left", drop=2), Column("token", "left", drop=1),
            Column("via", "left", drop=3)]
    rows = [[_when(e.get("at")), e.get("user") or "-", f"{e['method']} {e['path']}",
             _status(e["status"]), e.get("client") or "-", e.get("token_id") or "-",
             e.get("via") or "-"] for e in entries]
    return fitted_table("audit (state-changing requests)", cols, rows, width)


def _status(status: int) -> Text:
    return Text(str(status), style="red" if status >= 400 else "")


def audit_line(entry: dict[str, Any]) -> Text:
    """One entry as a line (``audit --follow``): when, user, request, status, client."""
    return Text.assemble(
        _when(entry.get("at")), " ", (entry.get("user") or "-", "bold"), " ",
        f"{entry['method']} {entry['path']} ", _status(entry["status"]),
        f" from {entry.get('client') or '?'} via {entry.get('via') or '?'}"
        f" (token {entry.get('token_id') or '-'})")


@app.command()
def audit(user: str | None = typer.Option(None, "--user", help="only this user's requests"),
          limit: int = typer.Option(50, "--limit", min=1, max=1000,
                                    help="how many entries to show: the newest, or the "
                                         "oldest after --after"),
          after: str | None = typer.Option(None, "--after", help="start after this entry id "
                                           "(an entry's `id`, as --json prints it)"),
          refused: bool = typer.Option(False, "--refused", help="requests refused for want of "
                                       "a valid token (kept apart) instead"),
          follow: bool = typer.Option(False, "--follow", "-f",
                                      help="then print new entries as they come, until Ctrl-C"),
          as_json: bool = typer.Option(False, "--json", help="one JSON object per line"),
          home: Path | None = HomeOption) -> None:
    """State-changing requests (admin): who, what, when, from where, the answer's status.
    The newest --limit entries (or those after --after), oldest first; with --follow, then
    one line per new entry, polled every few seconds."""
    try:
        api = client(home)
        flags = {"refused": "true"} if refused else {}
        if after is None:
            page = api.get("/v1/audit", newest="true", limit=limit, user=user, **flags)
            after = "0"
        else:
            page = api.get("/v1/audit", after=after, limit=limit, user=user, **flags)
        if as_json:
            _print_json_lines(page["entries"])
        elif follow:
            for entry in page["entries"]:
                console.print(audit_line(entry), soft_wrap=True)
        elif page["entries"]:
            console.print(audit_table(page["entries"]))
        else:
            err.print("no audit entries" + (f" of user {user}" if user else ""),
                      markup=False, highlight=False)
        while follow:
            after = page.get("next") or cursor_of(page, after)
            time.sleep(AUDIT_FOLLOW_POLL_S)
            page = api.get("/v1/audit", after=after, limit=AUDIT_FOLLOW_PAGE, user=user,
                           **flags)
            if as_json:
                _print_json_lines(page["entries"])
            else:
                for entry in page["entries"]:
                    console.print(audit_line(entry), soft_wrap=True)
    except CliError as exc:
        fail(exc)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def cursor_of(page: dict[str, Any], after: str) -> str:
    """Where the next read starts: the last entry's id, else where this one started."""
    return page["entries"][-1]["id"] if page["entries"] else after


def _print_json_lines(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        typer.echo(json.dumps(entry, separators=(",", ":")))

"""CLI errors print what they quote as plain text, never as rich markup."""

from __future__ import annotations

from scheduler.cli import app as cli_app


def test_bracketed_words_in_an_error_are_printed_as_they_are(capsys):
    cli_app.print_error("hosts[red].host_key: got 'x'; [bold]not[/bold] a key")
    assert "error: hosts[red].host_key: got 'x'; [bold]not[/bold] a key" in capsys.readouterr().err

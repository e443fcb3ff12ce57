"""CLI text: errors print what they quote as plain text, never as rich markup; percentages."""

from __future__ import annotations

from scheduler.cli import app as cli_app


def test_bracketed_words_in_an_error_are_printed_as_they_are(capsys):
    cli_app.print_error("hosts[red].host_key: got 'x'; [bold]not[/bold] a key")
    assert "error: hosts[red].host_key: got 'x'; [bold]not[/bold] a key" in capsys.readouterr().err


def test_a_saving_that_rounds_to_zero_is_never_negative_zero():
    from scheduler.cli.render.tables import percent
    assert [percent(v) for v in (-0.04, 0.0, 66.44, None)] == ["0.0%", "0.0%", "66.4%", "-"]

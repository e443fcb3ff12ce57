"""``schedctl providers check``: do the configured providers' credentials and permissions work?

Reads the same config as the daemon (``--config``, else ``GA_HOME/config.yaml``, else the
embedded replayed market), builds each adapter without starting anything, and runs its
``check()`` (one cheap call per region and permission, plus the Spot Advisor cache age for
AWS). Needs no running daemon. Exit code 0 when every check passed, 1 otherwise, 2 for a bad
config.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from scheduler.cli.app import HomeOption, app, console, err, print_error

if TYPE_CHECKING:
    from providers.base import Provider

providers_app = typer.Typer(help="Provider adapters: credentials, permissions, caches.",
                            no_args_is_help=True)
app.add_typer(providers_app, name="providers")


def _entries(config: Path | None, home: Path) -> tuple[list[dict[str, Any]], Path]:
    from scheduler.services.configured_market import config_entries

    return config_entries(home, config)


def _rows(provider: Provider) -> list[tuple[str, str, str, bool, str]]:
    from providers.base import Checked, Renames
    from providers.replay import ReplayProvider

    if isinstance(provider, Checked):
        return [(r.provider, r.region, r.check, r.ok, r.detail) for r in provider.check()]
    what = (f"replayed market {provider.market.path}" if isinstance(provider, ReplayProvider)
            else "local adapter")
    renamed = provider.renamed if isinstance(provider, Renames) else {}
    shown = "".join(f"; its {name} offers are listed as {label} (a real source serves "
                    f"{name})" for name, label in sorted(renamed.items()))
    return [(provider.name, "-", "configuration", True,
             f"{what} loaded; no credentials needed{shown}")]


@providers_app.command("check")
def check(
    config: Path | None = typer.Option(
        None, help="daemon config YAML (default: GA_HOME/config.yaml if present, else the "
                   "embedded replayed market)"),
    home: Path | None = HomeOption,
) -> None:
    """Per configured provider and region: do credentials and permissions work?"""
    from core.config import home_dir
    from scheduler.daemon_config import ConfigError
    from scheduler.provider_setup import build_providers

    home = home or home_dir()
    try:
        entries, base = _entries(config, home)
        adapters = build_providers(entries, base, home)
    except ConfigError as exc:
        print_error(exc)
        raise typer.Exit(2)
    table = Table(title="provider checks")
    for column in ("provider", "region", "check", "result", "detail"):
        table.add_column(column, overflow="fold", no_wrap=column in ("result",))
    failed = 0
    for adapter in adapters:
        try:
            rows = _rows(adapter)
        finally:
            adapter.close()
        for provider, region, what, ok, detail in rows:
            failed += not ok
            table.add_row(provider, region, what,
                          Text("ok", style="green") if ok else Text("FAILED", style="bold red"),
                          detail)
    console.print(table)
    if failed:
        err.print(f"[bold red]{failed} check(s) failed[/]")
        raise typer.Exit(1)

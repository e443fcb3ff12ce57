"""``schedctl daemon``: the scheduler service (pollers, reconcile loop, API) in the
foreground (:class:`scheduler.daemon.Daemon`)."""

from __future__ import annotations

from pathlib import Path

import typer

from scheduler.cli.app import app, print_error


@app.command()
def daemon(
    home: Path | None = typer.Option(None, "--home", envvar="GA_HOME",
                                        help="state directory (embedded Redis, checkpoints, ...)"),
    config: Path | None = typer.Option(
        None, help="daemon config YAML with a 'providers' list (default: GA_HOME/config.yaml "
                   "if present, else the replayed example market)"),
    market: Path | None = typer.Option(None, help="run just this replayed market YAML "
                                                     "(instead of the config's providers)"),
    host: str = typer.Option("127.0.0.1", help="API bind address"),
    port: int = typer.Option(0, help="API port (0: reuse the last one or pick a free one)"),
    log_level: str = typer.Option("INFO", help="DEBUG, INFO, WARNING or ERROR"),
    log_format: str = typer.Option("text", envvar="GA_LOG_FORMAT",
                                   help="text, or json: one JSON object per line"),
) -> None:
    """Run the scheduler service (pollers, reconcile loop, API) in the foreground."""
    from scheduler.daemon import Daemon, DaemonAlreadyRunning, DaemonSettings
    from scheduler.observability.logs import configure as configure_logs
    from scheduler.daemon_config import ConfigError, load_config_file
    from scheduler.replicas import ReplicaConfigError

    try:
        configure_logs(log_level, log_format)
    except ValueError as exc:
        print_error(exc)
        raise typer.Exit(2) from None
    try:
        settings = DaemonSettings(host=host, port=port)
        if home:
            settings.home = home
            settings.home.mkdir(parents=True, exist_ok=True)
        config = config or (settings.home / "config.yaml"
                            if (settings.home / "config.yaml").is_file() else None)
        if market:
            if not market.is_file():
                raise ConfigError(f"--market: {market} is not a file")
            settings.providers = [{"kind": "replay", "market": str(market.resolve())}]
        elif config:
            settings.providers = load_config_file(config)
            settings.config_dir = config.resolve().parent
            settings.config_file = config.resolve()
        daemon_ = Daemon(settings)
    except (ConfigError, DaemonAlreadyRunning, ReplicaConfigError) as exc:
        print_error(exc)
        raise typer.Exit(2)
    daemon_.run()

"""``schedctl``: the gpu-arbiter command line. Command modules register on the shared app."""

from scheduler.cli import (
    events,  # noqa: F401
    history,  # noqa: F401
    jobs,  # noqa: F401  (registers its commands)
    providers,  # noqa: F401
    simulate,  # noqa: F401
)
from scheduler.cli.app import app

__all__ = ["app"]

if __name__ == "__main__":
    app()

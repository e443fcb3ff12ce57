"""``schedctl``: the gpu-arbiter command line. Command modules register on the shared app, in
the order ``--help`` lists them."""

from scheduler.cli import (  # noqa: F401, I001  (each registers its commands)
    daemon,
    jobs,
    offers,
    history,
    plan,
    costs,
    events,
    providers,
    fleet,
    users,
    simulate,
    demo,
)
from scheduler.cli.app import app

__all__ = ["app"]

if __name__ == "__main__":
    app()

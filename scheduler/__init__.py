"""gpu-arbiter: the scheduler service (models, store, controller, agent, API, CLI)."""

__version__ = "0.1.0"

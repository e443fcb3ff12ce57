"""Observability: ``/metrics`` (Prometheus), structured logs, provider error counting.

- :mod:`scheduler.observability.metrics`: the per-app registry and this process's histograms.
- :mod:`scheduler.observability.providers`: the error listener counting failed provider calls
  in Redis (:mod:`scheduler.store.provider_errors`).
- :mod:`scheduler.observability.logs`: text or JSON log lines for the daemon.

The job event stream is :mod:`scheduler.store.events` (``GET /v1/events``, ``schedctl events``).
"""

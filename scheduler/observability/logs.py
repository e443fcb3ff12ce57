"""Log setup of the daemon: human-readable text (default) or one JSON object per line.

JSON lines (``schedctl daemon --log-format json`` or ``GA_LOG_FORMAT=json``) carry ``time``
(ISO 8601 UTC), ``level``, ``logger``, ``message``, plus whatever the call passed in
``extra=`` (e.g. ``job_id``, ``attempt``, ``provider``) and ``exc_info`` for exceptions, so a
log pipeline can filter by job without parsing messages.
"""

from __future__ import annotations

import logging

from pythonjsonlogger.json import JsonFormatter

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Routine per-second chatter of the scheduler and HTTP client hides what matters.
# Never below WARNING, even with --log-level DEBUG: botocore/urllib3 debug lines carry signed
# request headers (access key id, session token) and bodies.
NOISY_LOGGERS = ("apscheduler", "httpx", "httpcore", "botocore", "boto3", "s3transfer", "urllib3")


def json_formatter() -> logging.Formatter:
    """The JSON line formatter (time, level, logger, message, extras)."""
    return JsonFormatter(["levelname", "name", "message"], timestamp="time",
                         rename_fields={"levelname": "level", "name": "logger"})


def configure(level: str = "INFO", log_format: str = "text") -> None:
    """Send the root logger's records to stderr in ``log_format`` at ``level``.

    - **level**: ``DEBUG``, ``INFO``, ``WARNING`` or ``ERROR`` (any case).
    - **log_format**: ``text`` or ``json``.

    Raises ``ValueError`` naming the bad argument and the allowed values. Replaces handlers a
    previous call installed, so calling it twice does not double every line.
    """
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: must be one of {', '.join(FORMATS)}")
    levels = logging.getLevelNamesMapping()
    if level.upper() not in levels:
        raise ValueError(f"log level {level!r}: must be DEBUG, INFO, WARNING or ERROR")
    numeric = levels[level.upper()]
    handler = logging.StreamHandler()
    handler.setFormatter(json_formatter() if log_format == "json"
                         else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=numeric, handlers=[handler], force=True)
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, numeric))

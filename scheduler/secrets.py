"""The daemon's two secrets, kept in files of mode 0600 under GA_HOME (never in Redis):

- the API token the CLI sends (``GA_API_TOKEN`` overrides the file),
- the key agent tokens are derived from (``GA_AGENT_SECRET`` overrides; replicas sharing one
  Redis must share it).

Several replicas on one Redis: give every replica the same ``GA_API_TOKEN`` and
``GA_AGENT_SECRET`` (environment, e.g. from a secret manager or a shared 0600 file read by the
service unit). Only their :func:`fingerprint` goes to Redis, so a replica started with a
different secret is refused (:mod:`scheduler.replicas`) instead of failing its agents later.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

# Environment variables whose values are secrets wherever they show up (log lines, errors).
SECRET_ENV_NAMES = ("GA_API_TOKEN", "GA_AGENT_SECRET", "GA_AGENT_TOKEN",
                    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                    "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN")
# What the daemon hands its agents so they can reach an S3 checkpoint store (the boto3 chain
# reads them). The agent keeps them to itself: the job's command never sees them unless its own
# spec sets them (see scheduler.agent.job.job_environment).
STORE_ENV_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                   "AWS_DEFAULT_REGION", "AWS_REGION")
# Shorter values are not redacted: they would mask ordinary words (real secrets are longer).
_MIN_SECRET_CHARS = 8
REDACTED = "[redacted]"


def _load_or_create(path: Path, nbytes: int = 32) -> str:
    try:
        value = path.read_text().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(nbytes)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value)
    os.replace(tmp, path)
    return path.read_text().strip()


def api_token(home: Path) -> str:
    return os.environ.get("GA_API_TOKEN") or _load_or_create(home / "api-token")


def agent_secret(home: Path) -> bytes:
    return (os.environ.get("GA_AGENT_SECRET") or _load_or_create(home / "agent-secret")).encode()


def fingerprint(secret: str | bytes) -> str:
    """A short one-way digest of a secret (SHA-256 of a labelled value, 16 hex chars), for
    checking that replicas share the same secret without putting the secret in Redis. The
    secrets are 256-bit random values (or an operator's long token), so the digest reveals
    nothing usable."""
    raw = secret if isinstance(secret, bytes) else secret.encode()
    return hashlib.sha256(b"gpu-arbiter fingerprint\0" + raw).hexdigest()[:16]


class RedactSecrets(logging.Filter):
    """A handler filter that replaces every known secret value in a record's message (and
    traceback) by ``[redacted]``. A backstop: secrets are not logged on purpose, but a library
    error message or a traceback may quote one."""

    def __init__(self, values: Iterable[str]) -> None:
        super().__init__()
        self.values = sorted({v for v in values if len(v) >= _MIN_SECRET_CHARS},
                             key=len, reverse=True)

    def _clean(self, text: str) -> str:
        for value in self.values:
            text = text.replace(value, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        trace = logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        if any(v in message or v in trace for v in self.values):
            # The traceback joins the message so that no formatter prints the original.
            record.msg = self._clean(message + (f"\n{trace}" if trace else ""))
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


def redact_logs(*known: str | bytes) -> RedactSecrets:
    """Install :class:`RedactSecrets` on every root-logger handler (call after the logging
    set-up) for ``known`` values, the values of :data:`SECRET_ENV_NAMES` in the environment and
    the password in ``REDIS_URL``. Returns the filter."""
    values = [v.decode() if isinstance(v, bytes) else v for v in known]
    values += [os.environ[name] for name in SECRET_ENV_NAMES if os.environ.get(name)]
    password = urlsplit(os.environ.get("REDIS_URL") or "").password
    if password:
        values.append(password)
    redacting = RedactSecrets(values)
    for handler in logging.getLogger().handlers:
        handler.addFilter(redacting)
    return redacting

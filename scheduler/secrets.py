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
import os
import secrets
from pathlib import Path


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

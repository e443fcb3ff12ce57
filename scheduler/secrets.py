"""The daemon's two secrets, kept in files of mode 0600 under GA_HOME (never in Redis):

- the API token the CLI sends (``GA_API_TOKEN`` overrides the file),
- the key agent tokens are derived from (``GA_AGENT_SECRET`` overrides; replicas sharing one
  Redis must share it).
"""

from __future__ import annotations

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

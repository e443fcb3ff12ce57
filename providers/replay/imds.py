"""Instance metadata in the shape of AWS IMDSv2, served per instance under ``/meta/<id>``.

- ``PUT  /meta/<id>/latest/api/token`` with header ``X-aws-ec2-metadata-token-ttl-seconds``
  (1..21600) → a session token (text).
- ``GET  /meta/<id>/latest/meta-data/spot/instance-action`` with header
  ``X-aws-ec2-metadata-token`` → 401 without a valid token, 404 without a notice, else 200
  ``{"action": "terminate", "time": "2026-11-30T12:00:00Z"}`` (as AWS documents it).
- ``GET  /meta/<id>/latest/meta-data/spot/termination-time`` → the same time as text (the older
  AWS path), ``GET .../meta-data/instance-id`` → the id.

Tokens are signed with the cloud's persisted secret rather than kept in memory, so they stay
valid across a restart of the cloud process, as an agent would expect from a real instance.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import datetime

from core.models.base import ensure_utc

TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
# AWS accepts token lifetimes from one second up to six hours.
MAX_TOKEN_TTL_S = 21600


def _sign(secret: str, instance_id: str, expires_s: int) -> str:
    msg = f"{instance_id}.{expires_s}".encode()
    return hmac.new(bytes.fromhex(secret), msg, hashlib.sha256).hexdigest()


def issue_token(secret: str, instance_id: str, ttl_s: int, now_s: float | None = None) -> str:
    """A token for ``instance_id`` valid ``ttl_s`` seconds. Raises ``ValueError`` when
    ``ttl_s`` is outside 1..21600."""
    if not 1 <= ttl_s <= MAX_TOKEN_TTL_S:
        raise ValueError(f"{TOKEN_TTL_HEADER} must be 1..{MAX_TOKEN_TTL_S}, got {ttl_s}")
    expires_s = int((time.time() if now_s is None else now_s) + ttl_s)
    return f"{expires_s}.{_sign(secret, instance_id, expires_s)}"


def token_valid(secret: str, instance_id: str, token: str | None,
                now_s: float | None = None) -> bool:
    """True when ``token`` was issued for ``instance_id`` by this cloud and has not expired."""
    if not token or "." not in token:
        return False
    expires_text, _, signature = token.partition(".")
    if not expires_text.isdigit():
        return False
    expires_s = int(expires_text)
    if expires_s < (time.time() if now_s is None else now_s):
        return False
    return hmac.compare_digest(signature, _sign(secret, instance_id, expires_s))


def format_notice_time(action_at: datetime) -> str:
    """``2026-11-30T12:00:00Z``: second precision, as AWS writes ``spot/instance-action``."""
    return ensure_utc(action_at).strftime("%Y-%m-%dT%H:%M:%SZ")

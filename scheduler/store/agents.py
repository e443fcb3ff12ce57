"""What agents report, their tokens, and the instances we launched.

Agent tokens are stored only as sha256 digests: Redis never holds a usable secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

import redis

from scheduler.models import Instance, parse_lenient
from scheduler.models.agents import AgentReport
from scheduler.store import keys

# Reports and tokens of an instance outlive it long enough for late final reports to land.
_AGENT_KEY_TTL_S = 7 * 24 * 3600


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class AgentStore:
    """Agent tokens (scoped to one instance of one job), last reports, launched instances."""

    def __init__(self, client: redis.Redis) -> None:
        self._r = client

    def issue_token(self, instance_key: str, job_id: str) -> str:
        """Create the token for the agent of ``instance_key`` (the launch's client token, known
        before the provider assigns an instance id). Returns the clear token; stores its digest
        with the job id it may act for."""
        token = secrets.token_urlsafe(32)
        self._r.set(keys.agent_token(instance_key), f"{job_id}:{_digest(token)}",
                    ex=_AGENT_KEY_TTL_S)
        return token

    def verify_token(self, instance_key: str, token: str) -> str | None:
        """Return the job id the token is scoped to, or ``None`` if it is not valid."""
        raw = self._r.get(keys.agent_token(instance_key))
        if not raw:
            return None
        job_id, digest = raw.rsplit(":", 1)
        return job_id if hmac.compare_digest(digest, _digest(token)) else None

    def save_report(self, instance_key: str, report: AgentReport) -> None:
        """Keep the newest report (log lines are stored with the job, not here)."""
        slim = report.model_copy(update={"log_lines": []})
        self._r.set(keys.agent_report(instance_key), slim.model_dump_json(), ex=_AGENT_KEY_TTL_S)

    def last_report(self, instance_key: str) -> AgentReport | None:
        raw = self._r.get(keys.agent_report(instance_key))
        return parse_lenient(AgentReport, raw) if raw else None

    def record_instance(self, instance: Instance) -> None:
        with self._r.pipeline(transaction=True) as pipe:
            pipe.set(keys.instance(instance.id), instance.model_dump_json())
            pipe.sadd(keys.INSTANCES_INDEX, instance.id)
            pipe.execute()

    def instance(self, instance_id: str) -> Instance | None:
        raw = self._r.get(keys.instance(instance_id))
        return parse_lenient(Instance, raw) if raw else None

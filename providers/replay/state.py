"""The replay cloud's persistent state: ``<state dir>/state.json``, rewritten atomically.

Everything the cloud knows lives here (the market clock's epoch, its port, every instance and
client token, the metadata-token secret), so a cloud process killed at any line and started
again loses nothing. Agent environments are *not* stored: they may hold secrets, and a retried
launch brings them again.
"""

from __future__ import annotations

import json
import os
import secrets
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from core.models import Instance, utcnow

# The state dir's layout, shared by the cloud process and its clients.
STATE_FILE = "state.json"
CLOUD_FILE = "cloud.json"  # the running cloud: pid, port, url
CLOUD_LOCK_FILE = "cloud.lock"  # held by the running cloud for its lifetime
SPAWN_LOCK_FILE = "spawn.lock"  # held by a client while it starts a cloud
CLOUD_LOG_FILE = "cloud.log"
STATE_VERSION = 1
# A cloud with no request and no live agent for this long exits (a client restarts it).
DEFAULT_IDLE_EXIT_S = 900.0


class InstanceRecord(Instance):
    """One instance as the cloud stores it: the public :class:`Instance` fields plus the agent
    process (``pid`` = its process group, ``pid_marker`` = its start time, to survive pid reuse),
    its work dir, when a terminate was asked for (``shutdown_at``), when its agent approved
    its preemption (``notice_approved_at``, Azure's Scheduled Events) and whether it is a
    launch that never boots (``boot_failed``: the offer's ``boot_failures``; no agent ever
    starts)."""

    # A state file written by a newer cloud may hold fields this one does not know.
    model_config = ConfigDict(extra="ignore")

    terminated_at: datetime | None = None
    shutdown_at: datetime | None = None
    notice_approved_at: datetime | None = None
    pid: int | None = None
    pid_marker: str | None = None
    agent_starts: int = 0
    boot_failed: bool = False
    work_dir: str

    def to_instance(self) -> Instance:
        """The record as the Provider protocol's :class:`Instance` (a copy)."""
        return Instance.model_validate(self.model_dump(include=set(Instance.model_fields)))


class CloudStateData(BaseModel):
    """The whole state file. ``epoch_wall`` anchors the market clock; ``port`` is reused by
    every restart; ``tokens`` maps client token → instance id; ``secret`` signs metadata
    tokens (hex); ``launches`` counts the launches of each offer series ever made (for
    ``boot_failures``; unlike records, never forgotten)."""

    model_config = ConfigDict(extra="ignore")

    version: int = STATE_VERSION
    market_path: str
    epoch_wall: datetime
    port: int | None = None
    secret: str = Field(default_factory=lambda: secrets.token_hex(32))
    instances: dict[str, InstanceRecord] = Field(default_factory=dict)
    tokens: dict[str, str] = Field(default_factory=dict)
    launches: dict[str, int] = Field(default_factory=dict)


class StateStore:
    """Loads and saves :class:`CloudStateData` in a state dir. Not thread-safe: the cloud
    serialises access with its own lock."""

    def __init__(self, state_dir: Path, data: CloudStateData) -> None:
        self.state_dir = state_dir
        self.data = data

    @property
    def path(self) -> Path:
        return self.state_dir / STATE_FILE

    @classmethod
    def open(cls, state_dir: Path, market_path: Path) -> StateStore:
        """Load ``state.json`` or create it (epoch = now). Raises ``ValueError`` when the file
        exists but is not a state file, rather than silently starting a new market."""
        state_dir.mkdir(parents=True, exist_ok=True)
        path = state_dir / STATE_FILE
        if path.exists():
            data = CloudStateData.model_validate_json(path.read_bytes())
            store = cls(state_dir, data)
        else:
            store = cls(state_dir, CloudStateData(market_path=str(market_path),
                                                  epoch_wall=utcnow()))
            store.save()
        return store

    def save(self) -> None:
        """Write the state atomically (temp file, fsync, ``os.replace``)."""
        tmp = self.path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        payload = self.data.model_dump_json(indent=1).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (used for ``cloud.json``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    os.replace(tmp, path)

"""The checkpoint stores every test here runs against: a local folder and a real S3 server."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.checkpoints import LocalObjectStore, ObjectStore, open_store


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalObjectStore(tmp_path / "store")
    return open_store(request.getfixturevalue("s3_store_url"))


def write(root: Path, files: dict[str, bytes]) -> Path:
    """Writes ``files`` (relative path → bytes) under ``root``; returns ``root``."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root

"""Where things live and which endpoints to use, from the environment.

- ``GA_DATA_DIR`` is *not* used here: it names the shared real-data folder (see
  :func:`shared_data_dir`).
- ``GA_HOME``: the scheduler's own state directory (embedded Redis, replay market state,
  local checkpoint store, daemon.json). Default: the user's data dir (platformdirs).
- ``REDIS_URL``: use this Redis instead of the embedded one.
- ``GA_STORE_URL``: checkpoint store (``file:///path`` or ``s3://bucket/prefix?endpoint_url=...``);
  default: a local directory under ``GA_HOME``.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

REPO_ROOT = Path(__file__).resolve().parent.parent


def home_dir() -> Path:
    """The scheduler's state directory (created if missing)."""
    path = Path(os.environ.get("GA_HOME") or platformdirs.user_data_dir("gpu-arbiter"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def shared_data_dir() -> Path:
    """The real public data folder: ``GA_DATA_DIR`` or ``../shared/data`` beside the repo."""
    env = os.environ.get("GA_DATA_DIR")
    return Path(env) if env else (REPO_ROOT.parent / "shared" / "data")


def examples_dir() -> Path:
    """The shipped examples (market, job spec, training script): ``GA_EXAMPLES_DIR``, else
    ``examples/`` of the source tree (an editable install, or the Docker image's copy)."""
    env = os.environ.get("GA_EXAMPLES_DIR")
    return Path(env) if env else REPO_ROOT / "examples"

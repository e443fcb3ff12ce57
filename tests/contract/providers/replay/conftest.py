"""Fixtures for the replay market contract tests: the shared real-data folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import shared_data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``GA_DATA_DIR`` (default ``../shared/data``); skips when the real data is absent."""
    path = shared_data_dir()
    if not (path / "catalogs").is_dir() or not (path / "traces").is_dir():
        pytest.skip(f"real public data not found at {path} (set GA_DATA_DIR)")
    return path

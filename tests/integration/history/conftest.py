"""Fixtures for the history integration tests: the real data folder and a Store over the
per-test flushed real Redis."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import shared_data_dir
from scheduler.store import Store

DUMPS = Path("price_history/aws_p2_p3_2019-12_2020-03/logs/aws/cost")
TSV = Path("price_history/aws_all_regions_2022-05-31/2022-05_gpu_types.tsv")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``GA_DATA_DIR`` (default ``../shared/data``); skips when the real dumps are absent."""
    path = shared_data_dir()
    if not (path / DUMPS).is_dir():
        pytest.skip(f"real price dumps not found at {path / DUMPS} (set GA_DATA_DIR)")
    return path


@pytest.fixture
def store(redis_client) -> Store:
    return Store.over(redis_client)

"""Checks shared by the fault end-to-end tests: the job finished as if nothing had happened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from scheduler.checkpoints.checkpoints import list_checkpoints, restore_latest
from scheduler.checkpoints.objectstore import ObjectStore
from tests.e2e.conftest import load_params


def assert_final_model_is_the_reference(store: ObjectStore, job_id: str, reference: Path,
                                        into: Path) -> None:
    """The newest checkpoint is the final one and its model equals an uninterrupted run's."""
    manifest = restore_latest(store, job_id, into)
    assert manifest is not None and manifest.final
    assert list_checkpoints(store, job_id)[0].final
    got, want = load_params(into / "final_model.npz"), load_params(reference)
    assert set(got) == set(want)
    for key in want:
        assert np.array_equal(got[key], want[key]), f"{key} differs from the uninterrupted run"


def assert_resumed_from_the_committed_checkpoint(job: dict[str, Any]) -> None:
    """Every move after a stop resumed from the checkpoint committed at that stop."""
    messages = [e["message"] for e in job["events"]]
    committed = [m.split("; checkpoint ")[1].split(" committed")[0] for m in messages
                 if "; checkpoint " in m and " committed; migrating" in m]
    resumed = [m.split("resumed from checkpoint ")[1].split()[0].rstrip(",;") for m in messages
               if "resumed from checkpoint " in m]
    assert committed, messages
    assert resumed[:len(committed)] == committed, (committed, resumed)

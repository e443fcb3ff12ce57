from __future__ import annotations

from core.models import JobSpec


def spec(**overrides) -> JobSpec:
    data = dict(name="train", command="python train.py")
    data.update(overrides)
    return JobSpec.model_validate(data)

"""Pydantic bases shared by every model.

``StrictModel`` refuses unknown fields: a typo in a user's job YAML or an API body must fail
loudly instead of being ignored. ``ValueModel`` is the frozen variant for values such as offers.
``parse_lenient`` reads blobs back from Redis or a provider, where extra fields from a newer
version must not break an older reader.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ValueModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_lenient(model: type[M], data: str | bytes | dict[str, Any]) -> M:
    """Parse stored JSON (or a dict) into ``model``, ignoring fields this version does not know."""
    if isinstance(data, (str, bytes)):
        return model.model_validate_json(data, strict=False, context={"lenient": True})
    return model.model_validate(data, context={"lenient": True})


def utcnow() -> datetime:
    """Timezone-aware UTC now (all timestamps in gpu-arbiter are aware UTC)."""
    return datetime.now(timezone.utc)


def ensure_utc(value: datetime) -> datetime:
    """Return ``value`` as aware UTC; naive datetimes are taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)

"""Pydantic bases shared by every model.

``StrictModel`` refuses unknown fields: a typo in a user's job YAML or an API body must fail
loudly instead of being ignored. ``ValueModel`` is the frozen variant for values such as offers.
``parse_lenient`` reads blobs back from Redis or a provider, where extra fields from a newer
version must not break an older reader.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ValueModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_lenient(model: type[M], data: str | bytes | dict[str, Any]) -> M:
    """Parse stored JSON (or a dict) into ``model``, dropping fields this version does not know
    (at any depth), so data written by a newer version still reads.

    Raises ``pydantic.ValidationError`` when a known field is invalid, ``ValueError`` on bad JSON.
    """
    if isinstance(data, (str, bytes)):
        data = json.loads(data)
    return model.model_validate(_known_fields(model, data))


def _known_fields(annotation: Any, data: Any) -> Any:
    """``data`` with keys unknown to ``annotation`` removed, following nested models, lists,
    dicts and optionals."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if not isinstance(data, dict):
            return data
        fields = annotation.model_fields
        return {k: _known_fields(fields[k].annotation, v) for k, v in data.items() if k in fields}
    origin = get_origin(annotation)
    if origin in (list, tuple, set, frozenset) and isinstance(data, list):
        (inner, *_) = get_args(annotation) or (Any,)
        return [_known_fields(inner, item) for item in data]
    if origin is dict and isinstance(data, dict):
        args = get_args(annotation)
        return {k: _known_fields(args[1], v) for k, v in data.items()} if args else data
    if origin in (Union, UnionType):
        for option in get_args(annotation):
            if isinstance(option, type) and issubclass(option, BaseModel) and isinstance(data, dict):
                return _known_fields(option, data)
    return data


def utcnow() -> datetime:
    """Timezone-aware UTC now (all timestamps in gpu-arbiter are aware UTC)."""
    return datetime.now(UTC)


def ensure_utc(value: datetime) -> datetime:
    """Return ``value`` as aware UTC; naive datetimes are taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)

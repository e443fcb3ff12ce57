"""Pydantic bases shared by every model.

``StrictModel`` refuses unknown fields: a typo in a user's job YAML or an API body must fail
loudly instead of being ignored. It also refuses ``nan`` and ``inf`` for every float: YAML's
``.nan``/``.inf`` and JSON's ``NaN``/``Infinity`` are no amount of money or hours, and no JSON
writer could store them. ``Number`` and ``Count`` are the strict numeric field types of user
input: a boolean (``budget_usd: true``) or a numeric string is refused, not read as ``1``. ``ValueModel`` is the frozen variant for values such as offers.
``parse_lenient`` reads blobs back from Redis or a provider, where extra fields from a newer
version must not break an older reader, and where size limits on user input
(:func:`limits_apply`) do not apply: a record stored before a limit existed still reads.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Strict, ValidationError, ValidationInfo

M = TypeVar("M", bound=BaseModel)

Number = Annotated[float, Strict()]
"""A float field of user input: ints are fine, booleans and strings are refused."""
Count = Annotated[int, Strict()]
"""An int field of user input: booleans, floats and strings are refused."""


STORED = {"stored": True}
"""Validation context of a record read back from the store (see :func:`parse_lenient`)."""


def limits_apply(info: ValidationInfo) -> bool:
    """Whether size limits on user input apply to this validation: always, except for a
    record read back from the store (context :data:`STORED`)."""
    return not (isinstance(info.context, dict) and info.context.get("stored"))


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ValueModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_lenient(model: type[M], data: str | bytes | dict[str, Any]) -> M:
    """Parse stored JSON (or a dict) into ``model``, dropping fields this version does not know
    (at any depth), so data written by a newer version still reads.

    Validated with context :data:`STORED`: size limits on user input are not checked again.

    Raises ``pydantic.ValidationError`` when a known field is invalid, ``ValueError`` on bad JSON.
    """
    if isinstance(data, (str, bytes)):
        try:  # the common case, same version: pydantic's JSON parser, ~5x faster than below
            return model.model_validate_json(data, context=STORED)
        except ValidationError:
            data = json.loads(data)
    return model.model_validate(_known_fields(model, data), context=STORED)


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

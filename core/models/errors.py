"""Turn pydantic validation errors into messages a user can act on.

Each line names the field's dotted path, the bad value and what is allowed, e.g.
``market: got 'cheap'; allowed: 'spot', 'on-demand' or 'auto'``. The value of an unknown
field is never echoed (it is often a credential pasted under a name of its own), nor is a
value that holds a private key.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, get_args

from pydantic import BaseModel, ValidationError


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:  # a key of the input (an env name) may be long: cut it
            text = str(part) if len(str(part)) <= 60 else str(part)[:60] + "…"
            out += ("." if out else "") + text
    return out or "(spec)"


def _fields_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model that holds ``loc``'s last part (empty when unknown)."""
    current: Any = model
    for part in loc[:-1]:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        current = field.annotation
        for arg in get_args(current) or ():
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                current = arg
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def json_safe(value: Any) -> Any:
    """``value`` with every ``nan``/``inf`` float (at any depth of dicts, lists and tuples)
    replaced by its text (``"nan"``, ``"inf"``, ``"-inf"``) and every lone surrogate in a
    string (JSON's ``"\\ud800"``, not encodable as UTF-8) written as an escape, so an error
    body that echoes bad input can always be written as strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


BRIEF_MAX_CHARS = 200
# PEM and OpenSSH private keys begin so ("-----BEGIN OPENSSH PRIVATE KEY-----").
_PRIVATE_KEY_MARK = "PRIVATE KEY-----"


def brief(value: Any, depth: int = 0) -> Any:
    """``value`` as an error message may echo it: strings over :data:`BRIEF_MAX_CHARS` cut
    (saying their length; 40 characters inside a list or dict), lists and dicts of more than
    10 items (or nested deeper than two levels) replaced by a line saying their size. A
    refused 16 MiB ``command`` must not come back whole in the 422."""
    if isinstance(value, str):
        if _PRIVATE_KEY_MARK in value:
            return "(a private key; not shown)"
        most = BRIEF_MAX_CHARS if depth == 0 else 40
        if len(value) <= most:
            return value
        return f"{value[:most // 2]}… ({len(value)} characters)"
    if isinstance(value, (list, tuple, dict)):
        if len(value) > 10 or depth >= 2:
            return f"({type(value).__name__} of {len(value)} items)"
        if isinstance(value, dict):
            return {brief(str(k), depth + 1): brief(v, depth + 1) for k, v in value.items()}
        return [brief(v, depth + 1) for v in value]
    return value


def describe_validation_error(error: ValidationError,
                              model: type[BaseModel] | None = None) -> list[dict[str, Any]]:
    """List of ``{"field", "value", "problem"}`` dicts, one per error, in pydantic's order
    (``value`` is ``None`` for a missing or an unknown field).
    With ``model`` (the validated class), an unknown field gets a "did you mean" suggestion.
    ``value`` is JSON-safe (see :func:`json_safe`) and short (see :func:`brief`)."""
    problems = []
    for item in error.errors(include_url=False):
        kind = item.get("type", "")
        msg = item.get("msg", "")
        msg = msg.removeprefix("Value error, ")
        value = item.get("input")
        if kind == "extra_forbidden":
            msg, value = "unknown field (check the spelling)", None
            loc = tuple(item.get("loc", ()))
            close = difflib.get_close_matches(str(loc[-1]) if loc else "",
                                              _fields_at(model, loc), n=1)
            if close:
                msg = f"unknown field; did you mean {close[0]!r}?"
        elif kind == "missing":
            msg, value = "required field is missing", None
        if isinstance(value, str) and _PRIVATE_KEY_MARK in value:
            # A validator's own message may quote the value.
            msg = msg.replace(repr(value), "it").replace(value, "it")
        problems.append({"field": _path(tuple(item.get("loc", ()))),
                         "value": json_safe(brief(value)), "problem": msg})
    return problems


def format_validation_error(error: ValidationError) -> str:
    """One line per problem: ``field: got VALUE; problem``."""
    lines = []
    for p in describe_validation_error(error):
        if p["value"] is None and (p["problem"] == "required field is missing"
                                   or p["problem"].startswith("unknown field")):
            lines.append(f"{p['field']}: {p['problem']}")
            continue
        value = p["value"]
        shown = repr(value) if not isinstance(value, dict) else "{...}"
        if len(shown) > 80:
            shown = shown[:77] + "..."
        lines.append(f"{p['field']}: got {shown}; {p['problem']}")
    return "\n".join(lines)

"""Turn pydantic validation errors into messages a user can act on.

Each line names the field's dotted path, the bad value and what is allowed, e.g.
``market: got 'cheap'; allowed: 'spot', 'on-demand' or 'auto'``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(spec)"


def describe_validation_error(error: ValidationError) -> list[dict[str, Any]]:
    """List of ``{"field", "value", "problem"}`` dicts, one per error, in pydantic's order."""
    problems = []
    for item in error.errors(include_url=False):
        kind = item.get("type", "")
        msg = item.get("msg", "")
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        value = item.get("input")
        if kind == "extra_forbidden":
            msg = "unknown field (check the spelling)"
        elif kind == "missing":
            msg, value = "required field is missing", None
        problems.append({"field": _path(tuple(item.get("loc", ()))), "value": value,
                         "problem": msg})
    return problems


def format_validation_error(error: ValidationError) -> str:
    """One line per problem: ``field: got VALUE; problem``."""
    lines = []
    for p in describe_validation_error(error):
        if p["problem"] == "required field is missing":
            lines.append(f"{p['field']}: {p['problem']}")
            continue
        value = p["value"]
        shown = repr(value) if not isinstance(value, dict) else "{...}"
        if len(shown) > 80:
            shown = shown[:77] + "..."
        lines.append(f"{p['field']}: got {shown}; {p['problem']}")
    return "\n".join(lines)

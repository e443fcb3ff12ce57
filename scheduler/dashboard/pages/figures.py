"""How the Offers, Prices, Budgets, Fleet and Users pages show numbers and times: the CLI's
formats (so a page reads as ``schedctl`` prints), budget levels as CSS classes, and the
form values those pages parse.

Pages keep the exact value beside the text (``data-usd``, ``title``), so a browser test can
compare a page with the API's answer without parsing formatted text.
"""

from __future__ import annotations

import math
from datetime import datetime

from policies.budget import THRESHOLDS, budget_level
from scheduler.cli.render.offers import price_age
from scheduler.cli.render.tables import usd

__all__ = ["FormError", "age_since", "blank_none", "budget_view", "optional_number", "price_age",
           "usd"]


class FormError(ValueError):
    """A bad query or form value; ``field`` names it, the message says what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def optional_number(raw: str | None, field: str, *, minimum: float = 0.0) -> float | None:
    """``raw`` as a finite number >= ``minimum``; ``None`` for a missing or blank value.
    Raises :class:`FormError` naming ``field``."""
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        raise FormError(field, f"got {raw[:40]!r}; give a number") from None
    if not math.isfinite(value) or value < minimum:
        raise FormError(field, f"got {raw[:40]!r}; give a finite number >= {minimum:g}")
    return value


def blank_none(raw: str | None) -> str | None:
    """A form's text value, ``None`` when missing or blank."""
    return raw.strip() if raw and raw.strip() else None


def age_since(iso: str | None, now: datetime) -> tuple[str, float | None]:
    """``(text, seconds)`` from the ISO time ``iso`` to ``now`` (``("-", None)`` when unknown),
    the text as :func:`price_age` writes it."""
    if not iso:
        return "-", None
    seconds = max(0.0, (now - datetime.fromisoformat(iso)).total_seconds())
    return price_age(seconds), seconds


def budget_view(spent_usd: float, limit_usd: float | None) -> dict:
    """A budget as the pages show it: ``{spent_usd, limit_usd, fraction, percent, level,
    css, spent_text, limit_text}`` (USD; texts as ``$1,234.56``); ``level`` is the highest of :data:`policies.budget.THRESHOLDS` reached (0 below
    80 %), ``css`` ``budget-none`` (no limit), ``budget-ok``, ``budget-80``, ``budget-90`` or
    ``budget-100``; ``fraction`` is spent / limit (``None`` without a limit)."""
    if limit_usd is None:
        return {"spent_usd": spent_usd, "limit_usd": None, "fraction": None, "percent": None,
                "level": 0.0, "css": "budget-none", "spent_text": usd(spent_usd, 2),
                "limit_text": "-"}
    level = float(budget_level(spent_usd, limit_usd))
    fraction = spent_usd / limit_usd if limit_usd > 0 else 1.0
    css = "budget-ok" if level < THRESHOLDS[0] else f"budget-{round(level * 100)}"
    return {"spent_usd": spent_usd, "limit_usd": limit_usd, "fraction": fraction,
            "percent": f"{100 * fraction:.0f}%", "level": level, "css": css,
            "spent_text": usd(spent_usd, 2), "limit_text": usd(limit_usd, 2)}

"""Where a price series comes from, so replayed markets never pollute real price history.

A **source** names one namespace of price history:

- ``real``: prices a cloud reported (a provider's API, public catalogs) and imported real
  dumps (``schedctl history import``). Its keys are the layout history always had
  (``ga:hist:{series}:*``, index ``ga:series``), so history stored before sources existed
  stays readable, as real.
- ``replay:<market name>``: what a replayed market (:mod:`providers.replay`) reported, e.g.
  ``replay:demo``. Replayed offers use the imitated clouds' names (``aws``), so the same
  series key can exist in both namespaces; each keeps its own points and extent.

A query names the sources it reads with a **selector** (:func:`parse_selector`): ``real``,
``replay`` (every replayed market), ``replay:<name>``, ``all``, or ``auto`` (the services'
default: real history when it covers the question, else the replayed markets').
"""

from __future__ import annotations

import re

REAL = "real"
REPLAY_PREFIX = "replay:"
SELECTORS = ("auto", "real", "replay", "replay:<market name>", "all")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")


def replay(market_name: str) -> str:
    """The source of a replayed market named ``market_name`` (``replay:<name>``).

    Raises:
        ValueError: the name is not 1-63 letters, digits, ``.``, ``_`` or ``-`` (it becomes
            part of Redis keys).
    """
    if not _NAME_RE.match(market_name or ""):
        raise ValueError(f"replay market name {market_name!r}: use 1-63 letters, digits, "
                         "'.', '_' or '-' (starting with a letter or digit)")
    return REPLAY_PREFIX + market_name


def for_market(market_name: str) -> str:
    """The source of a replayed market, its name made key-safe (characters other than
    letters, digits, ``.``, ``_``, ``-`` become ``-``; at most 63): ``"my demo"`` →
    ``replay:my-demo``. Market files allow any name; keys do not."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", market_name).lstrip("._-")[:63]
    return replay(safe or "unnamed")


def check(source: str) -> str:
    """``source`` itself when it is ``real`` or a valid ``replay:<name>``; else ``ValueError``."""
    if source == REAL:
        return source
    if source.startswith(REPLAY_PREFIX):
        return replay(source[len(REPLAY_PREFIX):])
    raise ValueError(f"history source {source!r}: allowed real or replay:<market name>")


def is_replay(source: str) -> bool:
    return source.startswith(REPLAY_PREFIX)


def label(source: str) -> str:
    """Words for a reader: ``real prices`` or ``replayed market 'demo' (not real prices)``."""
    if is_replay(source):
        return f"replayed market {source[len(REPLAY_PREFIX):]!r} (not real prices)"
    return "real prices"


def parse_selector(text: str | None) -> str:
    """A query's source selector, normalised: ``auto`` (for ``None``/``""``), ``real``,
    ``replay``, ``all`` or ``replay:<name>``.

    Raises:
        ValueError: anything else; the message lists the allowed forms.
    """
    value = (text or "auto").strip()
    if value in ("auto", REAL, "replay", "all"):
        return value
    try:
        return check(value)
    except ValueError:
        raise ValueError(f"got {text!r}; allowed: {', '.join(SELECTORS)}") from None


def matching(selector: str, known: set[str]) -> list[str]:
    """The sources among ``known`` (plus ``real``) that an explicit selector names, sorted
    real first. ``auto`` is resolved by the caller (it depends on the data asked for)."""
    if selector == REAL:
        return [REAL]
    if selector == "all":
        return [REAL] + sorted(s for s in known if is_replay(s))
    if selector == "replay":
        return sorted(s for s in known if is_replay(s))
    return [selector]

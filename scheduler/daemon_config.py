"""The daemon's config file: ``GA_HOME/config.yaml`` (or ``schedctl daemon --config PATH``).

::

    providers:                     # the adapters to run: scheduler.provider_setup
      - kind: replay
        market: examples/market.yaml
    budgets: {alice: 500, bob: 120.5}               # optional, per owner, USD
    budget_webhook: https://hooks.example.com/gpu-budget  # optional

``providers`` is handed to :func:`scheduler.provider_setup.build_providers`. Budgets are
per-user limits in USD, applied to every job whose spec has that ``owner``; the webhook
receives each budget alert (80, 90, 100 %) as a JSON POST (``GA_BUDGET_WEBHOOK_URL``
overrides it). The whole file is checked when the daemon starts, not when the first alert is
due. Errors are :class:`ConfigError` naming the file and the field.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, Field, ValidationError

from core import yaml_files
from core.models import StrictModel, format_validation_error
from core.models.base import Number

_OWNER_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?\Z")
WEBHOOK_URL_ENV = "GA_BUDGET_WEBHOOK_URL"


class ConfigError(ValueError):
    """The daemon config file, or a part of it, is invalid (the message names which)."""


def _owners(limits: dict[str, float]) -> dict[str, float]:
    for name in limits:
        if not _OWNER_RE.match(name):
            raise ValueError(f"{name!r}: owners are 1-63 lowercase letters, digits, '.', '_' "
                             "or '-' (as in a job spec's owner)")
    return limits


def _limit(usd: float) -> float:
    if not usd > 0 or usd == float("inf"):
        raise ValueError("the limit must be a positive number of USD")
    return usd


def _webhook(url: str | None) -> str | None:
    if url is not None and not re.match(r"^https?://[^\s/]+", url):
        raise ValueError("must be an http:// or https:// URL")
    return url


class BudgetConfig(StrictModel):
    """The ``budgets`` (owner → USD, > 0) and ``budget_webhook`` (http(s) URL) of the config."""

    budgets: Annotated[dict[str, Annotated[Number, AfterValidator(_limit)]],
                       AfterValidator(_owners)] = Field(default_factory=dict)
    budget_webhook: Annotated[str | None, AfterValidator(_webhook)] = None


TOP_LEVEL_FIELDS = ("providers", *BudgetConfig.model_fields)


def _read(path: Path) -> Any:
    try:
        return yaml_files.load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def _budgets(raw: dict[str, Any], where: Path | str) -> BudgetConfig:
    try:
        return BudgetConfig.model_validate({k: raw[k] for k in BudgetConfig.model_fields
                                            if raw.get(k) is not None})
    except ValidationError as exc:
        raise ConfigError(f"{where}: {format_validation_error(exc)}") from None


def load_config_file(path: Path) -> list[dict[str, Any]]:
    """The ``providers`` list of the config file at ``path`` (entries as written), after
    checking the whole file: its top-level fields and its budgets. Raises
    :class:`ConfigError`."""
    raw = _read(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("providers"), list) or not raw["providers"]:
        raise ConfigError(f"{path}: needs a non-empty 'providers' list")
    unknown = set(raw) - set(TOP_LEVEL_FIELDS)
    if unknown:
        raise ConfigError(f"{path}: unknown top-level field(s) {sorted(unknown)}; "
                          f"allowed: {', '.join(TOP_LEVEL_FIELDS)}")
    _budgets(raw, path)
    return raw["providers"]


def load_budget_config(path: Path | None, env: dict[str, str] | None = None) -> BudgetConfig:
    """Budgets of the config file at ``path`` (none when ``path`` is ``None`` or missing), the
    webhook overridden by ``GA_BUDGET_WEBHOOK_URL`` from ``env`` (default ``os.environ``).
    Raises :class:`ConfigError`."""
    raw: dict[str, Any] = {}
    if path is not None and path.is_file():
        loaded = _read(path)
        raw = loaded if isinstance(loaded, dict) else {}
    url = (os.environ if env is None else env).get(WEBHOOK_URL_ENV)
    if url:
        # A bad URL from the environment is named as such, not as the file's.
        _budgets({"budget_webhook": url}, WEBHOOK_URL_ENV)
        raw = {**raw, "budget_webhook": url}
    return _budgets(raw, path if path is not None and path.is_file() else WEBHOOK_URL_ENV)

"""``kind: vastai`` in the daemon's ``providers`` list (:mod:`scheduler.provider_setup`
imports this module). Example::

    - kind: vastai
      gpu_models: [RTX4090, RTX3090, A100]
      min_reliability: 0.97
      countries: [US, CA, DE]
      bid: {margin_fraction: 0.15, max_bid_usd_per_hour: 0.60}
      launch:
        image: pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime
        disk_gib: 60

Every field is documented on :class:`providers.vastai.settings.VastSettings`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from providers.base import Provider
from providers.vastai.provider import VastProvider
from providers.vastai.settings import VastSettings

CREDENTIALS_COME_FROM = ("set VAST_API_KEY in the daemon's environment, or save the key with "
                         "`vastai set api-key` (the vastai CLI's key file); it is never logged")


class VastConfig(VastSettings):
    """The entry as written: :class:`VastSettings` plus its ``kind``."""

    kind: str


def from_config(entry: dict[str, Any], base: Path, home: Path) -> Provider:
    """The adapter of one validated ``kind: vastai`` entry. Raises pydantic's
    ``ValidationError`` naming the field (the caller formats it). ``base`` and ``home`` are
    unused: the entry names no file and the adapter keeps nothing on disk."""
    return VastProvider(VastConfig.model_validate(entry))

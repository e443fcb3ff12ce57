"""Configuration of the Vast.ai adapter: what a user writes under ``providers:`` with
``kind: vastai``. Strict (``extra="forbid"``): a typo in the YAML fails loudly.

The API key never appears here: it comes from ``VAST_API_KEY`` or the key file the ``vastai``
CLI writes (``vastai set api-key``), as the SDK resolves it (:mod:`providers.vastai.client`).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from core.models import Market, StrictModel
from providers.regional_settings import (
    DEFAULT_AGENT_PIP_SPEC,
    DEFAULT_AGENT_VENV,
    OneLine,
)

DEFAULT_SERVER_URL = "https://console.vast.ai"
# Vast's create endpoint takes a bid between these (USD/hour per machine; docs.vast.ai,
# "create instance", field price: 0.001 <= x <= 128).
MIN_BID_USD_PER_HOUR, MAX_BID_USD_PER_HOUR = 0.001, 128.0
# docs.vast.ai "create instance": image at most 1024 characters, disk at least 8 GB.
IMAGE_MAX_CHARS, MIN_DISK_GIB = 1024, 8.0
_COUNTRY_RE = re.compile(r"^[A-Z]{2}\Z")
_GPU_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*\Z")


class BidPolicy(StrictModel):
    """How an interruptible (spot) launch bids (``bid:`` section).

    The bid is the ask's current minimum bid plus ``margin_fraction`` of it plus
    ``margin_usd_per_hour``, then lowered to the smallest of ``max_bid_usd_per_hour``, the
    machine's on-demand price (a higher bid buys nothing on-demand does not) and the job's
    ``max_price_usd_per_hour``. When that cap is below the minimum bid the launch is refused:
    a bid below the minimum never runs, and an omitted bid would rent on-demand.

    - **margin_fraction**: share of the minimum bid added (0–1, default 0.1: 10 % above it,
      so that the next small rise of the market does not outbid the instance at once).
    - **margin_usd_per_hour**: USD/hour added on top (≥ 0, default 0).
    - **max_bid_usd_per_hour**: the user's cap per instance (optional; 0.001–128, Vast's range).
    """

    margin_fraction: float = Field(default=0.1, ge=0, le=1)
    margin_usd_per_hour: float = Field(default=0.0, ge=0, le=MAX_BID_USD_PER_HOUR)
    max_bid_usd_per_hour: float | None = Field(default=None, ge=MIN_BID_USD_PER_HOUR,
                                               le=MAX_BID_USD_PER_HOUR)


class VastLaunchSettings(StrictModel):
    """How instances are created (``launch:`` section).

    - **image**: the Docker image (at most 1,024 characters, e.g.
      ``pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime``). It needs ``python3`` (3.11+) with
      ``venv`` and ``base64``; the onstart script installs the agent into it.
    - **disk_gib**: the instance's disk, GiB (≥ 8, Vast's minimum; default 40). Offers are
      searched priced with this much storage, so ``dph_total`` includes it.
    - **agent_pip_spec** / **agent_venv**: what ``pip install`` installs and where (as for the
      region-based clouds; ``agent_venv`` null installs into the image's ``python3``).
    - **supervisor**: how the onstart script keeps the agent running: ``nohup`` (default; a
      Vast instance is a Docker container without systemd) or ``auto`` (systemd when it runs).
    """

    image: OneLine = Field(max_length=IMAGE_MAX_CHARS)
    disk_gib: float = Field(default=40.0, ge=MIN_DISK_GIB, le=100_000)
    agent_pip_spec: OneLine = DEFAULT_AGENT_PIP_SPEC
    agent_venv: str | None = DEFAULT_AGENT_VENV
    supervisor: str = "nohup"

    @field_validator("agent_venv")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\n" in value):
            raise ValueError("must be an absolute path (or null for the image's python3)")
        return value

    @field_validator("supervisor")
    @classmethod
    def _supervisor(cls, value: str) -> str:
        if value not in ("nohup", "auto"):
            raise ValueError("must be nohup or auto")
        return value


class VastSettings(StrictModel):
    """The ``kind: vastai`` provider entry (see :mod:`scheduler.provider_setup`).

    - **gpu_models**: GPU models to offer, in the project's names (``RTX4090``, ``H100``,
      ``A100``; see :func:`providers.vastai.translate.gpu_model`); empty (default) = all.
    - **min_reliability**: hosts with a lower ``reliability`` are not offered (0–1,
      default 0.95).
    - **countries**: two-letter country codes of the hosts (``[US, DE]``); empty = all.
    - **verified_only**: only Vast-verified hosts (default true; the SDK's default filter).
    - **max_offers**: at most this many asks per market and poll (1–20,000, default 5,000;
      searched in pages of 1,000). A poll that returns exactly this many logs a warning.
    - **markets**: ``spot`` (interruptible bids) and/or ``on-demand``; default both.
    - **server_url**: the API root; default ``https://console.vast.ai`` (local fakes).
    - **retries**: attempts per request for 429/502/503/504 and connection errors (the SDK's
      own retry, 1–10, default 3). **timeout_s**: per request, seconds (default 30).
    - **bid**: see :class:`BidPolicy`. **launch**: see :class:`VastLaunchSettings`
      (optional; without it offers and prices only).
    """

    gpu_models: list[str] = Field(default_factory=list)
    min_reliability: float = Field(default=0.95, ge=0, le=1)
    countries: list[str] = Field(default_factory=list)
    verified_only: bool = True
    max_offers: int = Field(default=5000, ge=1, le=20_000)
    markets: list[Market] = Field(default_factory=lambda: [Market.SPOT, Market.ON_DEMAND],
                                  min_length=1)
    server_url: str = DEFAULT_SERVER_URL
    retries: int = Field(default=3, ge=1, le=10)
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    bid: BidPolicy = Field(default_factory=BidPolicy)
    launch: VastLaunchSettings | None = None

    @field_validator("countries")
    @classmethod
    def _countries(cls, value: list[str]) -> list[str]:
        bad = [c for c in value if not _COUNTRY_RE.match(c)]
        if bad:
            raise ValueError(f"{bad} are not two-letter upper-case country codes (e.g. US)")
        return value

    @field_validator("gpu_models")
    @classmethod
    def _gpu_models(cls, value: list[str]) -> list[str]:
        bad = [m for m in value if not _GPU_MODEL_RE.match(m)]
        if bad:
            raise ValueError(f"{bad} are not GPU model names (e.g. RTX4090, H100)")
        return value

    @field_validator("server_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^\s/]+(/\S*)?\Z", value):
            raise ValueError("must be an http(s):// URL")
        return value.rstrip("/")

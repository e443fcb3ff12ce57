"""Configuration of the Alibaba Cloud adapter: what a user writes under ``providers:`` with
``kind: aliyun``.

Strict (``extra="forbid"``): a typo in the YAML fails loudly. Credentials never appear here;
they come from the environment (``ALIBABA_CLOUD_ACCESS_KEY_ID`` /
``ALIBABA_CLOUD_ACCESS_KEY_SECRET``, optionally ``ALIBABA_CLOUD_SECURITY_TOKEN`` for STS; the
SDK's older ``ALIYUN_ACCESS_KEY_ID`` / ``ALIYUN_ACCESS_KEY_SECRET`` also work) or, on an ECS
instance, from its RAM role (``ecs_ram_role``).

Prices: ECS answers in the account's currency (CNY on the China site, USD on the
international one) and names it in every price answer (``Currency``). Offers are compared in
USD, so every price is converted with ``exchange_rates_usd`` (USD per one unit of the
currency); USD needs no rate. The native price and currency stay in the adapter's own records
(:meth:`providers.aliyun.provider.AliyunProvider.native_price`) and in its logs.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from scheduler.models import Market, StrictModel

DEFAULT_AGENT_PIP_SPEC = "gpu-arbiter"
DEFAULT_AGENT_VENV = "/opt/gpu-arbiter/venv"
SITES = {"international": "USD", "china": "CNY"}  # site → the currency its prices are in

_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z0-9]+)+$")
_ZONE_SUFFIX_RE = re.compile(r"^(?P<region>[a-z]{2}(-[a-z0-9]+)*?)(-[a-z]|(?<=\d)[a-z])$")
_TYPE_PATTERN_RE = re.compile(r"^[a-z0-9*][a-z0-9.*-]*$")
_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")
_URL_RE = re.compile(r"^https?://[^\s/]+/?$")


def zone_region(zone: str) -> str | None:
    """``cn-hangzhou-i`` → ``cn-hangzhou``; ``ap-southeast-1a`` → ``ap-southeast-1``; None when
    ``zone`` is not a zone name (ECS zones are the region plus ``-<letter>``, or a letter right
    after the region's digit)."""
    match = _ZONE_SUFFIX_RE.match(zone)
    if not match or not _REGION_RE.match(match.group("region")):
        return None
    return match.group("region")


def _one_line(value: str, what: str) -> str:
    if not value or "\n" in value or "\r" in value or value != value.strip():
        raise ValueError(f"{what} must be one non-empty line without surrounding spaces")
    return value


class AliyunLaunchSettings(StrictModel):
    """How instances are launched (``launch:`` section). Without it the adapter lists offers and
    prices but refuses to launch.

    - **image_id**: image for every region (``ubuntu_22_04_x64_20G_alibase_…vhd`` or a custom
      ``m-…``), or a map region → image. It needs ``python3`` (3.11+) with ``venv``, ``curl``
      and NVIDIA drivers.
    - **vswitches**: map zone → vSwitch id (``vsw-…``), required: ECS launches into a VPC
      vSwitch, which fixes the zone. Zones without one are not offered while ``launch`` is set.
    - **security_groups**: map region → security group id (``sg-…``) of the vSwitches' VPC;
      the instance needs outbound HTTPS to the daemon's API URL and the checkpoint store.
    - **key_pair_name**, **ram_role_name**: SSH key pair and instance RAM role (optional).
    - **system_disk_category** (default ``cloud_essd``) and **system_disk_size_gib** (default
      100, 20–2048).
    - **internet_max_bandwidth_out_mbps**: public bandwidth, pay-by-traffic (default 10; 0 =
      no public IP, then the vSwitch needs a NAT gateway for the instance to reach out).
    - **spot_strategy**: ``SpotAsPriceGo`` (default: pay the market price, never outbid) or
      ``SpotWithPriceLimit`` with ``SpotPriceLimit`` = **spot_price_limit_ratio** (0–1,
      default 1) × the offer's on-demand price in the account's currency.
    - **agent_pip_spec** / **agent_venv**: as for AWS (what ``pip install`` installs, and where).
    """

    image_id: str | dict[str, str]
    vswitches: dict[str, str] = Field(min_length=1)
    security_groups: dict[str, str] = Field(min_length=1)
    key_pair_name: str | None = None
    ram_role_name: str | None = None
    system_disk_category: Literal["cloud_essd", "cloud_ssd", "cloud_efficiency",
                                  "cloud_auto"] = "cloud_essd"
    system_disk_size_gib: int = Field(default=100, ge=20, le=2048)
    internet_max_bandwidth_out_mbps: int = Field(default=10, ge=0, le=100)
    spot_strategy: Literal["SpotAsPriceGo", "SpotWithPriceLimit"] = "SpotAsPriceGo"
    spot_price_limit_ratio: float = Field(default=1.0, gt=0, le=1)
    agent_pip_spec: str = Field(default=DEFAULT_AGENT_PIP_SPEC, min_length=1)
    agent_venv: str | None = DEFAULT_AGENT_VENV

    @field_validator("image_id")
    @classmethod
    def _image_shape(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        for image in (value.values() if isinstance(value, dict) else [value]):
            _one_line(image, "an image id")
        if isinstance(value, dict):
            bad = [r for r in value if not _REGION_RE.match(r)]
            if bad:
                raise ValueError(f"{bad} are not region ids (e.g. cn-hangzhou)")
        return value

    @field_validator("vswitches")
    @classmethod
    def _vswitches_shape(cls, value: dict[str, str]) -> dict[str, str]:
        for zone, vsw in value.items():
            if zone_region(zone) is None:
                raise ValueError(f"{zone!r} is not a zone id (e.g. cn-hangzhou-i)")
            if not vsw.startswith("vsw-"):
                raise ValueError(f"{zone}: {vsw!r} is not a vSwitch id (vsw-…)")
        return value

    @field_validator("security_groups")
    @classmethod
    def _groups_shape(cls, value: dict[str, str]) -> dict[str, str]:
        for region, group in value.items():
            if not _REGION_RE.match(region):
                raise ValueError(f"{region!r} is not a region id (e.g. cn-hangzhou)")
            if not group.startswith("sg-"):
                raise ValueError(f"{region}: {group!r} is not a security group id (sg-…)")
        return value

    @field_validator("agent_pip_spec", "key_pair_name", "ram_role_name")
    @classmethod
    def _single_line(cls, value: str | None) -> str | None:
        return None if value is None else _one_line(value, "the value")

    @field_validator("agent_venv")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\n" in value):
            raise ValueError("must be an absolute path (or null for the system python3)")
        return value

    def image_for(self, region: str) -> str | None:
        """The image to launch in ``region``, or None when the map has none for it."""
        return self.image_id.get(region) if isinstance(self.image_id, dict) else self.image_id


class AliyunSettings(StrictModel):
    """The ``kind: aliyun`` provider entry (see :mod:`scheduler.provider_setup`).

    - **regions**: region ids to poll and launch in, e.g. ``[cn-hangzhou, ap-southeast-1]``
      (required; checked against ``DescribeRegions``).
    - **site**: ``international`` (default; prices in USD) or ``china`` (prices in CNY): the
      currency assumed when an answer does not name one.
    - **exchange_rates_usd**: USD per one unit of each non-USD currency, e.g.
      ``{CNY: 0.1385}``; required for ``site: china``. Prices in a currency without a rate are
      left out (with a warning).
    - **instance_types**: instance-type patterns (``*`` wildcards, e.g. ``["ecs.gn6i-*",
      "ecs.gn7*"]``); empty (default) means every type with GPUs.
    - **markets**: which markets to offer; default both ``spot`` and ``on-demand``.
    - **endpoint_url**: the ECS endpoint (``https://host`` or ``http://host:port`` for a local
      fake); default the SDK's endpoint for each region, over HTTPS.
    - **ecs_ram_role**: take credentials from this RAM role of the ECS instance the daemon runs
      on, when no access key is in the environment.
    - **max_attempts**: tries per call when ECS throttles or fails transiently (1–20, default
      5), waiting **retry_base_wait_s** (default 0.5) doubling up to **retry_max_wait_s**
      (default 20), with jitter.
    - **history_lookback_h**: hours of spot price history fetched by the first ``poll_prices``
      (default 24; ECS keeps 30 days = 720 h).
    - **spot_duration_h**: the spot protection period asked for at launch and priced (0–6,
      default 1, ECS's default; 0 is ~10 % cheaper but may be reclaimed at once).
    - **unknown_interruption_risk**: risk (0–1) given to spot offers ``DescribeSpotAdvice``
      does not rate; default 0.25 (no data is treated as risky).
    - **launch**: see :class:`AliyunLaunchSettings` (optional).
    """

    regions: list[str] = Field(min_length=1)
    site: Literal["international", "china"] = "international"
    exchange_rates_usd: dict[str, float] = Field(default_factory=dict)
    instance_types: list[str] = Field(default_factory=list)
    markets: list[Market] = Field(default_factory=lambda: [Market.SPOT, Market.ON_DEMAND],
                                  min_length=1)
    endpoint_url: str | None = None
    ecs_ram_role: str | None = None
    max_attempts: int = Field(default=5, ge=1, le=20)
    retry_base_wait_s: float = Field(default=0.5, gt=0, le=10)
    retry_max_wait_s: float = Field(default=20.0, gt=0, le=300)
    history_lookback_h: float = Field(default=24.0, gt=0, le=720)
    spot_duration_h: int = Field(default=1, ge=0, le=6)
    unknown_interruption_risk: float = Field(default=0.25, ge=0, le=1)
    launch: AliyunLaunchSettings | None = None

    @field_validator("regions")
    @classmethod
    def _regions_shape(cls, value: list[str]) -> list[str]:
        bad = [r for r in value if not _REGION_RE.match(r)]
        if bad:
            raise ValueError(f"{bad} are not region ids (e.g. cn-hangzhou)")
        if len(set(value)) != len(value):
            raise ValueError("lists a region twice")
        return value

    @field_validator("exchange_rates_usd")
    @classmethod
    def _rates_shape(cls, value: dict[str, float]) -> dict[str, float]:
        for currency, rate in value.items():
            if not _CURRENCY_RE.match(currency):
                raise ValueError(f"{currency!r} is not a currency code (e.g. CNY)")
            if not rate > 0:
                raise ValueError(f"{currency}: the rate must be > 0 (USD per one {currency})")
        return value

    @field_validator("instance_types")
    @classmethod
    def _patterns_shape(cls, value: list[str]) -> list[str]:
        bad = [p for p in value if not _TYPE_PATTERN_RE.match(p)]
        if bad:
            raise ValueError(f"{bad} are not instance-type patterns (e.g. ecs.gn6i-c4g1.xlarge, "
                             "ecs.gn7*)")
        return value

    @field_validator("endpoint_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        if value is not None and not _URL_RE.match(value):
            raise ValueError("must be http(s)://host[:port] (no path, no credentials)")
        if value is not None and "@" in value:
            raise ValueError("must not contain credentials")
        return value

    @field_validator("ecs_ram_role")
    @classmethod
    def _role_line(cls, value: str | None) -> str | None:
        return None if value is None else _one_line(value, "the role name")

    @model_validator(mode="after")
    def _consistent(self) -> AliyunSettings:
        currency = SITES[self.site]
        if currency != "USD" and currency not in self.exchange_rates_usd:
            raise ValueError(f"site {self.site} prices are in {currency}: set "
                             f"exchange_rates_usd: {{{currency}: <USD per 1 {currency}>}}")
        if self.retry_max_wait_s < self.retry_base_wait_s:
            raise ValueError("retry_max_wait_s must be ≥ retry_base_wait_s")
        if self.launch is None:
            return self
        missing = [r for r in self.regions if self.launch.image_for(r) is None]
        if missing:
            raise ValueError(f"launch.image_id: no image for region(s) {missing}")
        no_group = [r for r in self.regions if r not in self.launch.security_groups]
        if no_group:
            raise ValueError(f"launch.security_groups: no security group for region(s) {no_group}")
        stray = [z for z in self.launch.vswitches if zone_region(z) not in self.regions]
        if stray:
            raise ValueError(f"launch.vswitches: zone(s) {stray} are not in the configured regions")
        return self

    @property
    def default_currency(self) -> str:
        """The currency of prices whose answer names none (the site's)."""
        return SITES[self.site]

    def usd_rate(self, currency: str | None) -> float | None:
        """USD per one unit of ``currency`` (None = the site's currency); None when unknown."""
        code = (currency or self.default_currency).upper()
        return 1.0 if code == "USD" else self.exchange_rates_usd.get(code)

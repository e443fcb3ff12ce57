"""Configuration of the Alibaba Cloud adapter: what a user writes under ``providers:`` with
``kind: aliyun``.

The fields every region-based cloud has (regions, instance types, markets, endpoint, price
history, the agent install) and the refused ``unknown_interruption_risk`` are documented on
:mod:`providers.regional_settings`. Credentials never appear here; they come from the
environment (``ALIBABA_CLOUD_ACCESS_KEY_ID`` / ``ALIBABA_CLOUD_ACCESS_KEY_SECRET``, optionally
``ALIBABA_CLOUD_SECURITY_TOKEN`` for STS; the SDK's older ``ALIYUN_ACCESS_KEY_ID`` /
``ALIYUN_ACCESS_KEY_SECRET`` also work) or, on an ECS instance, from its RAM role
(``ecs_ram_role``).

Prices: ECS answers in the account's currency (CNY on the China site, USD on the
international one) and names it in every price answer (``Currency``). Offers are compared in
USD, so every price is converted with ``exchange_rates_usd`` (USD per one unit of the
currency); USD needs no rate. The native price and currency stay in the adapter's own records
(``AliyunProvider.native_prices``) and in its logs.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from providers.regional_settings import (
    OneLine,
    RegionalLaunchSettings,
    RegionalSettings,
    id_map,
    images_shape,
    one_line,
)

SITES = {"international": "USD", "china": "CNY"}  # site → the currency its prices are in

_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z0-9]+)+\Z")
_ZONE_SUFFIX_RE = re.compile(r"^(?P<region>[a-z]{2}(-[a-z0-9]+)*?)(-[a-z]|(?<=\d)[a-z])\Z")
_CURRENCY_RE = re.compile(r"^[A-Z]{3}\Z")
_URL_RE = re.compile(r"^https?://[^\s/]+/?\Z")


def zone_region(zone: str) -> str | None:
    """``cn-hangzhou-i`` → ``cn-hangzhou``; ``ap-southeast-1a`` → ``ap-southeast-1``; None when
    ``zone`` is not a zone name (ECS zones are the region plus ``-<letter>``, or a letter right
    after the region's digit)."""
    match = _ZONE_SUFFIX_RE.match(zone)
    if not match or not _REGION_RE.match(match.group("region")):
        return None
    return match.group("region")


class AliyunLaunchSettings(RegionalLaunchSettings):
    """How instances are launched (``launch:`` section); with ``agent_pip_spec`` and
    ``agent_venv`` of :class:`providers.regional_settings.RegionalLaunchSettings`.

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
    """

    image_field = "image_id"
    zone_field = "vswitches"

    image_id: str | dict[str, str]
    vswitches: dict[str, str] = Field(min_length=1)
    security_groups: dict[str, str] = Field(min_length=1)
    key_pair_name: OneLine | None = None
    ram_role_name: OneLine | None = None
    system_disk_category: Literal["cloud_essd", "cloud_ssd", "cloud_efficiency",
                                  "cloud_auto"] = "cloud_essd"
    system_disk_size_gib: int = Field(default=100, ge=20, le=2048)
    internet_max_bandwidth_out_mbps: int = Field(default=10, ge=0, le=100)
    spot_strategy: Literal["SpotAsPriceGo", "SpotWithPriceLimit"] = "SpotAsPriceGo"
    spot_price_limit_ratio: float = Field(default=1.0, gt=0, le=1)

    @field_validator("image_id")
    @classmethod
    def _image_shape(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        return images_shape(value, lambda image: one_line(image, "an image id"), _REGION_RE,
                            AliyunSettings.region_hint)

    @field_validator("vswitches")
    @classmethod
    def _vswitches_shape(cls, value: dict[str, str]) -> dict[str, str]:
        return id_map(value, zone_region, "zone id (e.g. cn-hangzhou-i)", "vsw-", "vSwitch id")

    @field_validator("security_groups")
    @classmethod
    def _groups_shape(cls, value: dict[str, str]) -> dict[str, str]:
        return id_map(value, _REGION_RE.match, "region id (e.g. cn-hangzhou)", "sg-",
                      "security group id")


class AliyunSettings(RegionalSettings):
    """The ``kind: aliyun`` provider entry (see :mod:`scheduler.provider_setup`), with the
    fields of :class:`providers.regional_settings.RegionalSettings` (``regions`` like
    ``[cn-hangzhou, ap-southeast-1]``, checked against ``DescribeRegions``; ``instance_types``
    like ``["ecs.gn6i-*", "ecs.gn7*"]``).

    - **site**: ``international`` (default; prices in USD) or ``china`` (prices in CNY): the
      currency assumed when an answer does not name one.
    - **exchange_rates_usd**: USD per one unit of each non-USD currency, e.g.
      ``{CNY: 0.1385}``; required for ``site: china``. Prices in a currency without a rate are
      left out (with a warning).
    - **endpoint_url**: ``https://host`` or ``http://host:port``; default the SDK's endpoint for
      each region, over HTTPS.
    - **ecs_ram_role**: take credentials from this RAM role of the ECS instance the daemon runs
      on, when no access key is in the environment.
    - **max_attempts**: tries per call when ECS throttles or fails transiently (1–20, default
      5), waiting **retry_base_wait_s** (default 0.5) doubling up to **retry_max_wait_s**
      (default 20), with jitter.
    - **history_lookback_h**: at most 720 (ECS keeps 30 days of spot prices).
    - **spot_duration_h**: the spot protection period asked for at launch and priced (0–6,
      default 1, ECS's default; 0 is ~10 % cheaper but may be reclaimed at once).
    - **launch**: see :class:`AliyunLaunchSettings` (optional).
    """

    region_pattern = _REGION_RE
    region_hint = "region ids (e.g. cn-hangzhou)"
    type_hint = "ecs.gn6i-c4g1.xlarge, ecs.gn7*"
    zone_region = staticmethod(zone_region)

    site: Literal["international", "china"] = "international"
    exchange_rates_usd: dict[str, float] = Field(default_factory=dict)
    ecs_ram_role: OneLine | None = None
    max_attempts: int = Field(default=5, ge=1, le=20)
    retry_base_wait_s: float = Field(default=0.5, gt=0, le=10)
    retry_max_wait_s: float = Field(default=20.0, gt=0, le=300)
    history_lookback_h: float = Field(default=24.0, gt=0, le=720)
    spot_duration_h: int = Field(default=1, ge=0, le=6)
    launch: AliyunLaunchSettings | None = None

    @field_validator("exchange_rates_usd")
    @classmethod
    def _rates_shape(cls, value: dict[str, float]) -> dict[str, float]:
        for currency, rate in value.items():
            if not _CURRENCY_RE.match(currency):
                raise ValueError(f"{currency!r} is not a currency code (e.g. CNY)")
            if not rate > 0:
                raise ValueError(f"{currency}: the rate must be > 0 (USD per one {currency})")
        return value

    @field_validator("endpoint_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        if value is not None and not _URL_RE.match(value):
            raise ValueError("must be http(s)://host[:port] (no path, no credentials)")
        if value is not None and "@" in value:
            raise ValueError("must not contain credentials")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> AliyunSettings:
        currency = SITES[self.site]
        if currency != "USD" and currency not in self.exchange_rates_usd:
            raise ValueError(f"site {self.site} prices are in {currency}: set "
                             f"exchange_rates_usd: {{{currency}: <USD per 1 {currency}>}}")
        if self.retry_max_wait_s < self.retry_base_wait_s:
            raise ValueError("retry_max_wait_s must be ≥ retry_base_wait_s")
        no_group = [r for r in self.regions if self.launch and r not in self.launch.security_groups]
        if no_group:
            raise ValueError(f"launch.security_groups: no security group for region(s) {no_group}")
        return self

    @property
    def default_currency(self) -> str:
        """The currency of prices whose answer names none (the site's)."""
        return SITES[self.site]

"""Configuration of the AWS adapter: what a user writes under ``providers:`` with ``kind: aws``.

The fields every region-based cloud has (regions, instance types, markets, endpoint, price
history, the agent install) and the refused ``unknown_interruption_risk`` are documented on
:mod:`providers.regional_settings`. Credentials never appear here; boto3's standard chain
supplies them (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``~/.aws/credentials`` with an
optional ``profile``, SSO, or an instance/task role).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from providers.regional_settings import (
    RegionalLaunchSettings,
    RegionalSettings,
    id_map,
    images_shape,
)

DEFAULT_SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
# The Price List Query API answers only in these regions.
PRICING_REGIONS = ("us-east-1", "eu-central-1", "ap-south-1")

_REGION_RE = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d\Z")
_ZONE_RE = re.compile(r"^([a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d)[a-z](-[a-z0-9-]+)?\Z")


def zone_region(zone: str) -> str | None:
    """``us-east-1a`` → ``us-east-1`` (also Local Zones, ``us-west-2-lax-1a``); None if not a zone."""
    match = _ZONE_RE.match(zone)
    return match.group(1) if match else None


def _prefixed(values: list[str], prefix: tuple[str, ...], what: str) -> None:
    bad = [v for v in values if not v.startswith(prefix)]
    if bad:
        raise ValueError(f"{bad} are not {what}")


class AwsLaunchSettings(RegionalLaunchSettings):
    """How instances are launched (``launch:`` section); with ``agent_pip_spec`` and
    ``agent_venv`` of :class:`providers.regional_settings.RegionalLaunchSettings`.

    - **ami**: AMI for every region (``ami-0abc…``, or ``resolve:ssm:/aws/service/…`` which EC2
      resolves at launch), or a map region → AMI. It needs ``python3`` (3.11+) with ``venv``,
      ``curl`` and NVIDIA drivers, e.g. a Deep Learning Base AMI.
    - **subnets**: map availability zone → subnet id; zones not listed use the default VPC.
    - **security_group_ids**: security groups (the instance needs outbound HTTPS to the
      daemon's API URL and the checkpoint store; no inbound rule is needed).
    - **key_name**: EC2 key pair for SSH (optional).
    - **iam_instance_profile**: instance profile name or ARN (optional; e.g. for S3 access).
    """

    image_field = "ami"
    zone_field = "subnets"

    ami: str | dict[str, str]
    subnets: dict[str, str] = Field(default_factory=dict)
    security_group_ids: list[str] = Field(default_factory=list)
    key_name: str | None = None
    iam_instance_profile: str | None = None

    @field_validator("ami")
    @classmethod
    def _ami_shape(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        return images_shape(value, lambda ami: _prefixed(
            [ami], ("ami-", "resolve:ssm:"), "AMI ids (ami-…) or resolve:ssm:PARAMETER"),
            _REGION_RE, AwsSettings.region_hint)

    @field_validator("subnets")
    @classmethod
    def _subnets_shape(cls, value: dict[str, str]) -> dict[str, str]:
        return id_map(value, zone_region, "availability zone name (e.g. us-east-1a)", "subnet-",
                      "subnet id")

    @field_validator("security_group_ids")
    @classmethod
    def _groups_shape(cls, value: list[str]) -> list[str]:
        _prefixed(value, ("sg-",), "security group ids (sg-…)")
        return value


class AwsSettings(RegionalSettings):
    """The ``kind: aws`` provider entry (see :mod:`scheduler.provider_setup`), with the fields
    of :class:`providers.regional_settings.RegionalSettings` (``regions`` like
    ``[us-east-1, us-west-2]``, ``instance_types`` like ``["p3.*", "g5.*"]``).

    - **pricing_region**: region of the Price List API endpoint: ``us-east-1`` (default),
      ``eu-central-1`` or ``ap-south-1``.
    - **profile**: a named profile of the shared AWS config/credentials files (optional).
    - **endpoint_url** / **pricing_endpoint_url**: EC2 / Price List endpoints; default AWS's.
    - **max_attempts**: botocore attempts per call in adaptive retry mode (1–20, default 8).
    - **history_lookback_h**: at most 2160 (AWS keeps 90 days of spot prices).
    - **spot_advisor_url**: the Spot Instance Advisor JSON (``https://`` or ``file://``);
      default AWS's public file. Cached on disk for 6 h.
    - **launch**: see :class:`AwsLaunchSettings` (optional).
    """

    region_pattern = _REGION_RE
    region_hint = "region names (e.g. us-east-1)"
    type_hint = "p3.2xlarge, g5.*"
    zone_region = staticmethod(zone_region)

    pricing_region: str = "us-east-1"
    profile: str | None = None
    pricing_endpoint_url: str | None = None
    max_attempts: int = Field(default=8, ge=1, le=20)
    history_lookback_h: float = Field(default=24.0, gt=0, le=2160)
    spot_advisor_url: str = DEFAULT_SPOT_ADVISOR_URL
    launch: AwsLaunchSettings | None = None

    @field_validator("pricing_region")
    @classmethod
    def _pricing_region(cls, value: str) -> str:
        if value not in PRICING_REGIONS:
            raise ValueError(f"must be one of {', '.join(PRICING_REGIONS)}")
        return value

    @field_validator("endpoint_url", "pricing_endpoint_url", "spot_advisor_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|file)://\S+\Z", value):
            raise ValueError("must be an http(s):// or file:// URL")
        return value

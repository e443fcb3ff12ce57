"""Configuration of the AWS adapter: what a user writes under ``providers:`` with ``kind: aws``.

Strict (``extra="forbid"``): a typo in the YAML fails loudly. Credentials never appear here;
boto3's standard chain supplies them (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``~/.aws/credentials`` with an optional ``profile``, SSO, or an instance/task role).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from scheduler.models import Market, StrictModel

DEFAULT_SPOT_ADVISOR_URL = "https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json"
# The Price List Query API answers only in these regions.
PRICING_REGIONS = ("us-east-1", "eu-central-1", "ap-south-1")
DEFAULT_AGENT_PIP_SPEC = "gpu-arbiter"
DEFAULT_AGENT_VENV = "/opt/gpu-arbiter/venv"

_REGION_RE = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d$")
_ZONE_RE = re.compile(r"^([a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d)[a-z](-[a-z0-9-]+)?$")
_TYPE_PATTERN_RE = re.compile(r"^[a-z0-9*][a-z0-9.*-]*$")


def zone_region(zone: str) -> str | None:
    """``us-east-1a`` → ``us-east-1`` (also Local Zones, ``us-west-2-lax-1a``); None if not a zone."""
    match = _ZONE_RE.match(zone)
    return match.group(1) if match else None


class AwsLaunchSettings(StrictModel):
    """How instances are launched (``launch:`` section). Without it the adapter lists offers and
    prices but refuses to launch.

    - **ami**: AMI for every region (``ami-0abc…``, or ``resolve:ssm:/aws/service/…`` which EC2
      resolves at launch), or a map region → AMI. It needs ``python3`` (3.11+) with ``venv``,
      ``curl`` and NVIDIA drivers, e.g. a Deep Learning Base AMI.
    - **subnets**: map availability zone → subnet id; zones not listed use the default VPC.
    - **security_group_ids**: security groups (the instance needs outbound HTTPS to the
      daemon's API URL and the checkpoint store; no inbound rule is needed).
    - **key_name**: EC2 key pair for SSH (optional).
    - **iam_instance_profile**: instance profile name or ARN (optional; e.g. for S3 access).
    - **agent_pip_spec**: what ``pip install`` installs on the instance; default
      ``gpu-arbiter`` (any pip requirement: ``gpu-arbiter==0.1.0``, ``git+https://…``).
    - **agent_venv**: virtualenv the agent is installed into (default
      ``/opt/gpu-arbiter/venv``); ``null`` installs into the system ``python3``.
    """

    ami: str | dict[str, str]
    subnets: dict[str, str] = Field(default_factory=dict)
    security_group_ids: list[str] = Field(default_factory=list)
    key_name: str | None = None
    iam_instance_profile: str | None = None
    agent_pip_spec: str = Field(default=DEFAULT_AGENT_PIP_SPEC, min_length=1)
    agent_venv: str | None = DEFAULT_AGENT_VENV

    @field_validator("ami")
    @classmethod
    def _ami_shape(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        amis = value.values() if isinstance(value, dict) else [value]
        for ami in amis:
            if not ami.startswith(("ami-", "resolve:ssm:")):
                raise ValueError(f"{ami!r} is not an AMI id (ami-…) or resolve:ssm:PARAMETER")
        if isinstance(value, dict):
            for region in value:
                if not _REGION_RE.match(region):
                    raise ValueError(f"{region!r} is not a region name (e.g. us-east-1)")
        return value

    @field_validator("subnets")
    @classmethod
    def _subnets_shape(cls, value: dict[str, str]) -> dict[str, str]:
        for zone, subnet in value.items():
            if zone_region(zone) is None:
                raise ValueError(f"{zone!r} is not an availability zone name (e.g. us-east-1a)")
            if not subnet.startswith("subnet-"):
                raise ValueError(f"{zone}: {subnet!r} is not a subnet id (subnet-…)")
        return value

    @field_validator("security_group_ids")
    @classmethod
    def _groups_shape(cls, value: list[str]) -> list[str]:
        bad = [g for g in value if not g.startswith("sg-")]
        if bad:
            raise ValueError(f"{bad} are not security group ids (sg-…)")
        return value

    @field_validator("agent_pip_spec")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value or "\r" in value:
            raise ValueError("must be one line")
        return value

    @field_validator("agent_venv")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\n" in value):
            raise ValueError("must be an absolute path (or null for the system python3)")
        return value

    def ami_for(self, region: str) -> str | None:
        """The AMI to launch in ``region``, or None when the map has none for it."""
        return self.ami.get(region) if isinstance(self.ami, dict) else self.ami


class AwsSettings(StrictModel):
    """The ``kind: aws`` provider entry (see :mod:`scheduler.provider_setup`).

    - **regions**: regions to poll and launch in, e.g. ``[us-east-1, us-west-2]`` (required).
    - **instance_types**: instance-type patterns (``*`` wildcards, e.g. ``["p3.*", "g5.*"]``);
      empty (default) means every type that has GPUs.
    - **markets**: which markets to offer; default both ``spot`` and ``on-demand``.
    - **pricing_region**: region of the Price List API endpoint: ``us-east-1`` (default),
      ``eu-central-1`` or ``ap-south-1``.
    - **profile**: a named profile of the shared AWS config/credentials files (optional).
    - **endpoint_url** / **pricing_endpoint_url**: EC2 / Price List endpoints (local fakes or
      VPC endpoints); default AWS's.
    - **max_attempts**: botocore attempts per call in adaptive retry mode (1–20, default 8).
    - **history_lookback_h**: hours of spot price history fetched by the first
      ``poll_prices`` (default 24; AWS keeps 90 days = 2160 h).
    - **spot_advisor_url**: the Spot Instance Advisor JSON (``https://`` or ``file://``);
      default AWS's public file. Cached on disk for 6 h.
    - **unknown_interruption_risk**: risk (0–1) given to spot offers the advisor does not list;
      default 0.25 (the top bucket, ">20 %": no data is treated as risky).
    - **launch**: see :class:`AwsLaunchSettings` (optional).
    """

    regions: list[str] = Field(min_length=1)
    instance_types: list[str] = Field(default_factory=list)
    markets: list[Market] = Field(default_factory=lambda: [Market.SPOT, Market.ON_DEMAND],
                                  min_length=1)
    pricing_region: str = "us-east-1"
    profile: str | None = None
    endpoint_url: str | None = None
    pricing_endpoint_url: str | None = None
    max_attempts: int = Field(default=8, ge=1, le=20)
    history_lookback_h: float = Field(default=24.0, gt=0, le=2160)
    spot_advisor_url: str = DEFAULT_SPOT_ADVISOR_URL
    unknown_interruption_risk: float = Field(default=0.25, ge=0, le=1)
    launch: AwsLaunchSettings | None = None

    @field_validator("regions")
    @classmethod
    def _regions_shape(cls, value: list[str]) -> list[str]:
        bad = [r for r in value if not _REGION_RE.match(r)]
        if bad:
            raise ValueError(f"{bad} are not region names (e.g. us-east-1)")
        if len(set(value)) != len(value):
            raise ValueError("lists a region twice")
        return value

    @field_validator("instance_types")
    @classmethod
    def _patterns_shape(cls, value: list[str]) -> list[str]:
        bad = [p for p in value if not _TYPE_PATTERN_RE.match(p)]
        if bad:
            raise ValueError(f"{bad} are not instance-type patterns (e.g. p3.2xlarge, g5.*)")
        return value

    @field_validator("pricing_region")
    @classmethod
    def _pricing_region(cls, value: str) -> str:
        if value not in PRICING_REGIONS:
            raise ValueError(f"must be one of {', '.join(PRICING_REGIONS)}")
        return value

    @field_validator("endpoint_url", "pricing_endpoint_url", "spot_advisor_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|file)://\S+$", value):
            raise ValueError("must be an http(s):// or file:// URL")
        return value

    @model_validator(mode="after")
    def _launch_matches_regions(self) -> AwsSettings:
        if self.launch is None:
            return self
        missing = [r for r in self.regions if self.launch.ami_for(r) is None]
        if missing:
            raise ValueError(f"launch.ami: no AMI for region(s) {missing}")
        stray = [z for z in self.launch.subnets if zone_region(z) not in self.regions]
        if stray:
            raise ValueError(f"launch.subnets: zone(s) {stray} are not in the configured regions")
        return self

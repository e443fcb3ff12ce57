"""What the config entries of region-based clouds (``kind: aws``, ``kind: aliyun``) share: the
regions, instance-type patterns, markets and price-history fields, the agent install of the
``launch`` section, and the checks that a ``launch`` section fits the regions.

Strict (``extra="forbid"``): a typo in the YAML fails loudly. Credentials never appear here.

``unknown_interruption_risk`` is refused with an error that says why: an adapter leaves a spot
offer its cloud does not rate unrated (``interruption_risk`` None) and the service fills the one
prior of ``policies/priors.py``; a value here would be silently ignored, and a user who set it
should learn that it no longer decides anything.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field, field_validator, model_validator

from core.models import Market, StrictModel

DEFAULT_AGENT_PIP_SPEC = "gpu-arbiter"
DEFAULT_AGENT_VENV = "/opt/gpu-arbiter/venv"
_TYPE_PATTERN_RE = re.compile(r"^[a-z0-9*][a-z0-9.*-]*\Z")
_RETIRED_FIELDS = {
    "unknown_interruption_risk": "unrated spot offers take the one prior of policies/priors.py "
                                 "(UNKNOWN_SPOT_RISK); remove this field",
}


def one_line(value: str, what: str) -> str:
    """``value`` when it is one non-empty line without surrounding spaces; else ``ValueError``."""
    if not value or "\n" in value or "\r" in value or value != value.strip():
        raise ValueError(f"{what} must be one non-empty line without surrounding spaces")
    return value


def images_shape(value: str | dict[str, str], check: Callable[[str], object],
                 region_pattern: re.Pattern[str], region_hint: str) -> str | dict[str, str]:
    """An image field (one id, or a map region → id) when ``check`` passes every id (raising
    ``ValueError`` otherwise) and every map key matches ``region_pattern``."""
    for image in (value.values() if isinstance(value, dict) else [value]):
        check(image)
    bad = [r for r in value if not region_pattern.match(r)] if isinstance(value, dict) else []
    if bad:
        raise ValueError(f"{bad} are not {region_hint}")
    return value


def id_map(value: dict[str, str], key_ok: Callable[[str], object], key_what: str, prefix: str,
           what: str) -> dict[str, str]:
    """A map place → resource id (zone → subnet, region → security group) when every key
    passes ``key_ok`` and every id starts with ``prefix``; else ``ValueError`` naming the key
    (``key_what``) or the id (``what``)."""
    for key, item in value.items():
        if not key_ok(key):
            raise ValueError(f"{key!r} is not a {key_what}")
        if not item.startswith(prefix):
            raise ValueError(f"{key}: {item!r} is not a {what} ({prefix}…)")
    return value


# A text field that must be one line (it ends up in an API call or a shell script).
OneLine = Annotated[str, AfterValidator(lambda value: one_line(value, "the value"))]


class RegionalLaunchSettings(StrictModel):
    """The part of a ``launch:`` section every region-based cloud has.

    - **agent_pip_spec**: what ``pip install`` installs on the instance; default
      ``gpu-arbiter`` (any pip requirement: ``gpu-arbiter==0.1.0``, ``git+https://…``).
    - **agent_venv**: virtualenv the agent is installed into (default
      ``/opt/gpu-arbiter/venv``); ``null`` installs into the system ``python3``.

    A cloud's section names its image field (``image_field``: one id, or a map region → id)
    and its map zone → network (``zone_field``: subnets, vSwitches).
    """

    image_field: ClassVar[str]
    zone_field: ClassVar[str]

    agent_pip_spec: OneLine = DEFAULT_AGENT_PIP_SPEC
    agent_venv: str | None = DEFAULT_AGENT_VENV

    @field_validator("agent_venv")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\n" in value):
            raise ValueError("must be an absolute path (or null for the system python3)")
        return value

    def image_for(self, region: str) -> str | None:
        """The image to launch in ``region``, or None when the map has none for it."""
        image = getattr(self, self.image_field)
        return image.get(region) if isinstance(image, dict) else image

    def zones(self) -> list[str]:
        """The zones the section names networks for."""
        return list(getattr(self, self.zone_field))


class RegionalSettings(StrictModel):
    """The fields every region-based cloud's entry has.

    - **regions**: regions to poll and launch in (required, no repeats).
    - **instance_types**: instance-type patterns (``*`` wildcards); empty (default) means every
      type that has GPUs.
    - **markets**: which markets to offer; default both ``spot`` and ``on-demand``.
    - **endpoint_url**: the API endpoint (local fakes, VPC endpoints); default the cloud's.
    - **history_lookback_h**: hours of spot price history fetched by the first ``poll_prices``
      (default 24; each cloud bounds it by what it keeps).
    - **launch**: the cloud's launch section (optional; without it offers and prices only).

    A cloud sets ``region_pattern``, ``region_hint`` (e.g. ``"region names (e.g. us-east-1)"``),
    ``type_hint`` and ``zone_region`` (zone → its region, or None).
    """

    region_pattern: ClassVar[re.Pattern[str]]
    region_hint: ClassVar[str]
    type_hint: ClassVar[str]
    zone_region: ClassVar[Callable[[str], str | None]]

    regions: list[str] = Field(min_length=1)
    instance_types: list[str] = Field(default_factory=list)
    markets: list[Market] = Field(default_factory=lambda: [Market.SPOT, Market.ON_DEMAND],
                                  min_length=1)
    endpoint_url: str | None = None
    history_lookback_h: float = Field(default=24.0, gt=0)
    launch: RegionalLaunchSettings | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_retired_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for field, why in _RETIRED_FIELDS.items():
                if field in data:
                    raise ValueError(f"{field} is not a setting any more: {why}")
        return data

    @field_validator("regions")
    @classmethod
    def _regions_shape(cls, value: list[str]) -> list[str]:
        bad = [r for r in value if not cls.region_pattern.match(r)]
        if bad:
            raise ValueError(f"{bad} are not {cls.region_hint}")
        if len(set(value)) != len(value):
            raise ValueError("lists a region twice")
        return value

    @field_validator("instance_types")
    @classmethod
    def _patterns_shape(cls, value: list[str]) -> list[str]:
        bad = [p for p in value if not _TYPE_PATTERN_RE.match(p)]
        if bad:
            raise ValueError(f"{bad} are not instance-type patterns (e.g. {cls.type_hint})")
        return value

    def wants_type(self, instance_type: str) -> bool:
        """Whether ``instance_type`` matches a pattern of ``instance_types`` (all do when
        there are none)."""
        return not self.instance_types or any(
            fnmatch.fnmatchcase(instance_type, p) for p in self.instance_types)

    @model_validator(mode="after")
    def _launch_matches_regions(self) -> RegionalSettings:
        launch = self.launch
        if launch is None:
            return self
        missing = [r for r in self.regions if launch.image_for(r) is None]
        if missing:
            raise ValueError(f"launch.{launch.image_field}: no image for region(s) {missing}")
        zone_region = type(self).zone_region
        stray = [z for z in launch.zones() if zone_region(z) not in self.regions]
        if stray:
            raise ValueError(f"launch.{launch.zone_field}: zone(s) {stray} are not in the "
                             "configured regions")
        return self

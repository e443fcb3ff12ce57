"""Configuration of the GCP adapter: what a user writes under ``providers:`` with ``kind: gcp``.

The fields every region-based cloud has (regions, ``instance_types`` patterns, markets, the
agent install) and the refused ``unknown_interruption_risk`` are documented on
:mod:`providers.regional_settings`. Credentials never appear here: Application Default
Credentials supply them (:data:`providers.gcp.setup.CREDENTIALS_COME_FROM`).

Two inherited fields are refused with the reason: ``endpoint_url`` (the Google clients call it
``api_endpoint``, and there are two: Compute Engine and the Cloud Billing Catalog) and
``history_lookback_h`` (GCP publishes no spot price history; the catalog's current prices are
polled instead).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from providers.regional_settings import (
    OneLine,
    RegionalLaunchSettings,
    RegionalSettings,
    images_shape,
    one_line,
)

_REGION_RE = re.compile(r"^[a-z]+-[a-z]+\d+\Z")
_ZONE_RE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]\Z")
_PROJECT_RE = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]\Z")
_ACCELERATOR_PATTERN_RE = re.compile(r"^[a-z0-9*][a-z0-9*-]*\Z")
_ENDPOINT_RE = re.compile(r"^https?://[^\s/]+/?\Z")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]+\Z")
_REFUSED_FIELDS = {
    "endpoint_url": "the GCP entry names its endpoints api_endpoint (Compute Engine) and "
                    "billing_api_endpoint (Cloud Billing Catalog)",
    "history_lookback_h": "GCP publishes no spot price history; prices are the Cloud Billing "
                          "Catalog's current ones, polled",
}
# Images the agent can run on without extra setup: Google's Deep Learning VM images carry the
# NVIDIA driver, python3 and curl.
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11-py310"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def zone_region(zone: str) -> str | None:
    """``us-central1-a`` → ``us-central1``; None when ``zone`` is not a zone name."""
    match = _ZONE_RE.match(zone)
    return match.group(1) if match else None


class GcpLaunchSettings(RegionalLaunchSettings):
    """How instances are launched (``launch:`` section); with ``agent_pip_spec`` and
    ``agent_venv`` of :class:`providers.regional_settings.RegionalLaunchSettings`.

    - **image**: boot image for every region (``projects/P/global/images/NAME`` or
      ``…/images/family/FAMILY``), or a map region → image; default a Deep Learning VM
      image family (NVIDIA driver, ``python3``, ``curl``).
    - **network**: VPC network (``global/networks/default`` by default, or a full path).
    - **subnetworks**: map region → subnetwork (``regions/R/subnetworks/NAME`` or its name);
      regions not listed use the network's auto-mode subnetwork.
    - **external_ip**: give the VM an ephemeral external IP (default true; false needs Cloud
      NAT for the agent to reach the daemon and the checkpoint store).
    - **service_account**: e-mail of the VM's service account (optional; default none, so
      the VM holds no Google credentials), with the ``cloud-platform`` scope.
    - **disk_gib**: boot disk size in GiB (10–65536, default 100); **disk_type**
      (``pd-balanced`` by default).
    - **termination_action**: what Compute Engine does to a preempted Spot VM: ``DELETE``
      (default: nothing left to pay for) or ``STOP`` (the disk stays, and is billed).
    """

    image_field = "image"
    zone_field = "subnetworks"

    image: str | dict[str, str] = DEFAULT_IMAGE
    network: OneLine = "global/networks/default"
    subnetworks: dict[str, str] = Field(default_factory=dict)
    external_ip: bool = True
    service_account: str | None = None
    disk_gib: int = Field(default=100, ge=10, le=65536)
    disk_type: Literal["pd-balanced", "pd-ssd", "pd-standard", "hyperdisk-balanced"] = "pd-balanced"
    termination_action: Literal["STOP", "DELETE"] = "DELETE"

    @field_validator("image")
    @classmethod
    def _image_shape(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        def check(image: str) -> None:
            one_line(image, "image")
            if "/global/images/" not in f"/{image}":
                raise ValueError(f"{image!r} is not an image path "
                                 "(projects/P/global/images/NAME or …/images/family/F)")
        return images_shape(value, check, _REGION_RE, GcpSettings.region_hint)

    @field_validator("subnetworks")
    @classmethod
    def _subnetworks_shape(cls, value: dict[str, str]) -> dict[str, str]:
        for region, subnetwork in value.items():
            if not _REGION_RE.match(region):
                raise ValueError(f"{region!r} is not a region name (e.g. us-central1)")
            one_line(subnetwork, f"subnetworks.{region}")
        return value

    @field_validator("service_account")
    @classmethod
    def _email(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL_RE.match(value):
            raise ValueError("must be a service account e-mail (NAME@PROJECT.iam.gserviceaccount.com)")
        return value

    def zones(self) -> list[str]:
        """No zone-keyed field: subnetworks are regional (checked against the regions)."""
        return []

    def subnetwork_for(self, region: str) -> str | None:
        """The subnetwork path for ``region``, or None for the network's own."""
        name = self.subnetworks.get(region)
        if name is None or "/" in name:
            return name
        return f"regions/{region}/subnetworks/{name}"


class GcpSettings(RegionalSettings):
    """The ``kind: gcp`` provider entry (see :mod:`scheduler.provider_setup`), with the fields
    of :class:`providers.regional_settings.RegionalSettings` (``regions`` like
    ``[us-central1, europe-west4]``; ``instance_types`` are machine-type patterns like
    ``["g2-*", "n1-standard-*"]``, matched against the host machine type).

    - **project**: the Google Cloud project id (required).
    - **zones**: zones to offer and launch in (optional; default every zone ``regions.get``
      lists for the regions); each must lie in a configured region. Describe and terminate
      look in every zone of the regions either way.
    - **accelerators**: accelerator-type patterns (``nvidia-l4``, ``nvidia-tesla-*``); empty
      (default) means every GPU type.
    - **api_endpoint** / **billing_api_endpoint**: Compute Engine / Cloud Billing endpoints
      (``https://host[:port]``); default Google's. For local fakes and private endpoints.
    - **launch**: see :class:`GcpLaunchSettings` (optional; without it offers and prices only).
    """

    region_pattern = _REGION_RE
    region_hint = "region names (e.g. us-central1)"
    type_hint = "g2-standard-4, a2-*"
    zone_region = staticmethod(zone_region)

    project: str
    zones: list[str] = Field(default_factory=list)
    accelerators: list[str] = Field(default_factory=list)
    api_endpoint: str | None = None
    billing_api_endpoint: str | None = None
    launch: GcpLaunchSettings | None = None

    @model_validator(mode="before")
    @classmethod
    def _refused_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for field, why in _REFUSED_FIELDS.items():
                if field in data:
                    raise ValueError(f"{field} is not a gcp setting: {why}")
        return data

    @field_validator("project")
    @classmethod
    def _project_shape(cls, value: str) -> str:
        if not _PROJECT_RE.match(value):
            raise ValueError("must be a project id: 6-30 lowercase letters, digits or "
                             "hyphens, starting with a letter")
        return value

    @field_validator("accelerators")
    @classmethod
    def _accelerator_patterns(cls, value: list[str]) -> list[str]:
        bad = [p for p in value if not _ACCELERATOR_PATTERN_RE.match(p)]
        if bad:
            raise ValueError(f"{bad} are not accelerator-type patterns (e.g. nvidia-l4, "
                             "nvidia-tesla-*)")
        return value

    @field_validator("api_endpoint", "billing_api_endpoint")
    @classmethod
    def _endpoint_shape(cls, value: str | None) -> str | None:
        if value is not None and not _ENDPOINT_RE.match(value):
            raise ValueError("must be http(s)://host[:port] without a path")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _zones_in_regions(self) -> GcpSettings:
        bad = [z for z in self.zones if zone_region(z) not in self.regions]
        if bad:
            raise ValueError(f"zones {bad} are not zones of the configured regions")
        if self.launch is not None:
            stray = [r for r in self.launch.subnetworks if r not in self.regions]
            if stray:
                raise ValueError(f"launch.subnetworks: region(s) {stray} are not configured")
        return self

    def wants_accelerator(self, accelerator_type: str) -> bool:
        """Whether ``accelerator_type`` matches a pattern of ``accelerators`` (all do when
        there are none)."""
        return not self.accelerators or any(
            fnmatch.fnmatchcase(accelerator_type, p) for p in self.accelerators)

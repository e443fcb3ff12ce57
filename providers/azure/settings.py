"""Configuration of the Azure adapter: what a user writes under ``providers:`` with
``kind: azure``.

The fields every region-based cloud has (markets, price history, the agent install) and the
refused ``unknown_interruption_risk`` are documented on :mod:`providers.regional_settings`;
Azure calls regions **locations** (``eastus``) and instance types **VM sizes**
(``Standard_NC4as_T4_v3``), and so do the fields here (``locations``, ``vm_sizes``).

Credentials never appear here: azure-identity's ``DefaultAzureCredential`` finds them
(service principal in ``AZURE_CLIENT_ID``/``AZURE_TENANT_ID``/``AZURE_CLIENT_SECRET``, workload
or managed identity, or an ``az login``). Only the subscription id may be written here, or
taken from ``AZURE_SUBSCRIPTION_ID``.
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
)

DEFAULT_RESOURCE_MANAGER_URL = "https://management.azure.com"
DEFAULT_RETAIL_PRICES_URL = "https://prices.azure.com/api/retail/prices"

_LOCATION_RE = re.compile(r"^[a-z][a-z0-9]{2,39}\Z")
_ZONE_RE = re.compile(r"^(?P<location>[a-z][a-z0-9]{2,39})(-(?P<zone>[1-9]))?\Z")
_SIZE_PATTERN_RE = re.compile(r"^[A-Za-z0-9*][A-Za-z0-9_.*-]*\Z")
_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\Z")
# Resource group names: 1-90 of letters, digits, _ - . ( ), not ending in a period (ARM's rule).
_RESOURCE_GROUP_RE = re.compile(r"^[\w.()-]{0,89}[\w()-]\Z")
_URN_RE = re.compile(r"^[^:\s]+:[^:\s]+:[^:\s]+:[^:\s]+\Z")
_SUBNET_RE = re.compile(r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/"
                        r"Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+\Z", re.IGNORECASE)
_SSH_KEY_RE = re.compile(r"^(ssh-rsa|ssh-ed25519|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+"
                         r"( [^\n\r]*)?\Z")
_HTTPS_URL_RE = re.compile(r"^https://[^\s/@]+(/[^\s@?#]*)?\Z")


def zone_region(zone: str) -> str | None:
    """An offer's zone → its location: ``eastus-2`` → ``eastus`` (availability zone 2);
    ``westus`` → ``westus`` (a location without zones: its offers' zone is the location).
    None when ``zone`` is neither."""
    match = _ZONE_RE.match(zone)
    return match.group("location") if match else None


def zone_number(zone: str) -> str | None:
    """``eastus-2`` → ``"2"`` (what the VM body's ``zones`` takes); ``westus`` → None."""
    match = _ZONE_RE.match(zone)
    return match.group("zone") if match else None


def _image_reference(value: str) -> str:
    if not (_URN_RE.match(value) or value.lower().startswith("/subscriptions/")):
        raise ValueError(f"{value!r} is not an image URN (publisher:offer:sku:version) or an "
                         "image resource id (/subscriptions/…)")
    return value


class AzureLaunchSettings(RegionalLaunchSettings):
    """How Spot and pay-as-you-go VMs are created (``launch:`` section); with ``agent_pip_spec``
    and ``agent_venv`` of :class:`providers.regional_settings.RegionalLaunchSettings`.

    - **image**: a marketplace URN ``publisher:offer:sku:version`` (e.g.
      ``microsoft-dsvm:ubuntu-hpc:2204:latest``, drivers included) or an image resource id
      (``/subscriptions/…/images/…`` or a gallery image version), or a map location → either.
      It needs ``python3`` (3.11+) with ``venv``, ``curl`` and NVIDIA drivers.
    - **subnets**: map location → subnet resource id
      (``/subscriptions/…/virtualNetworks/…/subnets/…``), required for every location: the
      VM's network interface is created in it and deleted with the VM.
    - **public_ip**: give the VM a Standard public IP (deleted with the VM); default false, so
      the subnet needs outbound access (a NAT gateway) to reach the daemon's API and the
      checkpoint store.
    - **admin_username** (default ``azureuser``) and **ssh_public_key** (one OpenSSH public
      key line, required: Azure's Linux VMs need a key or a password, and passwords are never
      taken).
    - **os_disk_size_gib**: 30–4095, default 128; **os_disk_type**: ``StandardSSD_LRS``
      (default), ``Premium_LRS`` or ``Standard_LRS``. The disk is deleted with the VM.
    - **max_price**: what a Spot VM's ``billingProfile.maxPrice`` is: ``on-demand`` (default,
      sent as -1: Azure never evicts the VM for price and bills at most the pay-as-you-go
      price; the service itself moves a job whose price rises above its max price) or
      ``offer``: the offer's spot price × (1 + **max_price_margin**, default 0.2), capped at
      the on-demand price, USD with 5 decimals (Azure evicts the VM when the spot price rises
      above it).
    """

    image_field = "image"
    zone_field = "subnets"

    image: str | dict[str, str]
    subnets: dict[str, str] = Field(min_length=1)
    public_ip: bool = False
    admin_username: OneLine = "azureuser"
    ssh_public_key: OneLine
    os_disk_size_gib: int = Field(default=128, ge=30, le=4095)
    os_disk_type: Literal["StandardSSD_LRS", "Premium_LRS", "Standard_LRS"] = "StandardSSD_LRS"
    max_price: Literal["on-demand", "offer"] = "on-demand"
    max_price_margin: float = Field(default=0.2, ge=0, le=10)

    @field_validator("image")
    @classmethod
    def _image_shape(cls, value: str | dict[str, str]) -> str | dict[str, str]:
        return images_shape(value, _image_reference, _LOCATION_RE, AzureSettings.region_hint)

    @field_validator("subnets")
    @classmethod
    def _subnets_shape(cls, value: dict[str, str]) -> dict[str, str]:
        id_map(value, _LOCATION_RE.match, "location name (e.g. eastus)", "/subscriptions/",
               "subnet resource id")
        bad = [location for location, subnet in value.items() if not _SUBNET_RE.match(subnet)]
        if bad:
            raise ValueError(f"{bad}: not a subnet resource id (/subscriptions/<id>/resourceGroups"
                             "/<rg>/providers/Microsoft.Network/virtualNetworks/<vnet>/subnets/<name>)")
        return value

    @field_validator("admin_username")
    @classmethod
    def _user_shape(cls, value: str) -> str:
        if not re.match(r"^[a-z_][a-z0-9_-]{0,63}\Z", value) or value in ("root", "admin"):
            raise ValueError("must be a Linux user name (lower case, not root or admin)")
        return value

    @field_validator("ssh_public_key")
    @classmethod
    def _key_shape(cls, value: str) -> str:
        if not _SSH_KEY_RE.match(value):
            raise ValueError("must be one OpenSSH public key line (ssh-ed25519 AAAA… or "
                             "ssh-rsa AAAA…)")
        return value


class AzureSettings(RegionalSettings):
    """The ``kind: azure`` provider entry (see :mod:`scheduler.provider_setup`), with the
    fields of :class:`providers.regional_settings.RegionalSettings`, two of them under Azure's
    names:

    - **locations** (the base's ``regions``): e.g. ``[eastus, westeurope]``.
    - **vm_sizes** (the base's ``instance_types``): VM size patterns, ``*`` wildcards,
      case-sensitive, e.g. ``["Standard_NC*", "Standard_ND*"]``; empty (default) means every
      size with GPUs.
    - **subscription_id**: the subscription (a UUID); default ``AZURE_SUBSCRIPTION_ID``.
    - **resource_group**: where VMs are created and listed; required with ``launch``.
    - **endpoint_url**: the Resource Manager URL; default ``https://management.azure.com``
      (sovereign clouds: e.g. ``https://management.usgovcloudapi.net``; the token scope
      follows it; set ``AZURE_AUTHORITY_HOST`` for their login host).
    - **retail_prices_url**: the Retail Prices API; default
      ``https://prices.azure.com/api/retail/prices``.
    - **max_attempts**: tries per Resource Manager call on throttling, 5xx and connection
      errors (1–10, default 4), waiting **retry_base_wait_s** (default 0.8) doubling.
    - **history_lookback_h**: has no effect (the Retail Prices API keeps no history).
    - **launch**: see :class:`AzureLaunchSettings` (optional).
    """

    region_pattern = _LOCATION_RE
    region_hint = "location names (e.g. eastus)"
    type_hint = "Standard_NC4as_T4_v3, Standard_NC*"
    zone_region = staticmethod(zone_region)

    regions: list[str] = Field(min_length=1, alias="locations")
    instance_types: list[str] = Field(default_factory=list, alias="vm_sizes")
    subscription_id: str | None = None
    resource_group: str | None = None
    endpoint_url: str | None = None
    retail_prices_url: str = DEFAULT_RETAIL_PRICES_URL
    max_attempts: int = Field(default=4, ge=1, le=10)
    retry_base_wait_s: float = Field(default=0.8, gt=0, le=30)
    launch: AzureLaunchSettings | None = None

    @field_validator("instance_types")
    @classmethod
    def _patterns_shape(cls, value: list[str]) -> list[str]:
        bad = [p for p in value if not _SIZE_PATTERN_RE.match(p)]
        if bad:
            raise ValueError(f"{bad} are not VM size patterns (e.g. {cls.type_hint})")
        return value

    @field_validator("subscription_id")
    @classmethod
    def _subscription_shape(cls, value: str | None) -> str | None:
        if value is not None and not _UUID_RE.match(value):
            raise ValueError("must be a subscription id (a UUID)")
        return value

    @field_validator("resource_group")
    @classmethod
    def _group_shape(cls, value: str | None) -> str | None:
        if value is not None and not _RESOURCE_GROUP_RE.match(value):
            raise ValueError("must be a resource group name (1-90 letters, digits, _ - . ( ), "
                             "not ending in '.')")
        return value

    @field_validator("endpoint_url", "retail_prices_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        if value is not None and not _HTTPS_URL_RE.match(value):
            raise ValueError("must be an https:// URL without credentials or query "
                             "(Azure's token policy refuses plain http)")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _launch_needs(self) -> AzureSettings:
        if self.launch is None:
            return self
        if self.resource_group is None:
            raise ValueError("resource_group: required with a launch section")
        missing = [r for r in self.regions if r not in self.launch.subnets]
        if missing:
            raise ValueError(f"launch.subnets: no subnet for location(s) {missing}")
        return self

    @property
    def resource_manager_url(self) -> str:
        return self.endpoint_url or DEFAULT_RESOURCE_MANAGER_URL

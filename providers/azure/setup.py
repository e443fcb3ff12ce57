"""``kind: azure`` in the daemon config (dispatched by :mod:`scheduler.provider_setup`)::

    - kind: azure
      subscription_id: 00000000-0000-0000-0000-000000000000   # or AZURE_SUBSCRIPTION_ID
      locations: [eastus, westeurope]
      vm_sizes: ["Standard_NC*", "Standard_ND*"]
      resource_group: gpu-arbiter
      launch:
        image: microsoft-dsvm:ubuntu-hpc:2204:latest
        subnets: {eastus: /subscriptions/…/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/vnet/subnets/default}
        ssh_public_key: ssh-ed25519 AAAA… ops@example.com

Every field is documented on :class:`providers.azure.settings.AzureSettings`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from providers.azure.provider import AzureProvider
from providers.azure.settings import AzureSettings
from providers.base import Provider

SUBSCRIPTION_ENV = "AZURE_SUBSCRIPTION_ID"
CREDENTIALS_COME_FROM = (
    "azure-identity's DefaultAzureCredential chain supplies them: AZURE_CLIENT_ID/"
    "AZURE_TENANT_ID/AZURE_CLIENT_SECRET in the daemon's environment, a managed identity, or "
    "an 'az login'; the subscription id comes from subscription_id or AZURE_SUBSCRIPTION_ID; "
    "secrets never go in this file or the logs")


class AzureConfig(AzureSettings):
    """The ``kind: azure`` entry: :class:`AzureSettings` plus ``kind``; ``subscription_id``
    defaults to ``AZURE_SUBSCRIPTION_ID`` and is required one way or the other."""

    kind: str
    subscription_id: str | None = Field(default=None, validate_default=True)

    @field_validator("subscription_id", mode="before")
    @classmethod
    def _subscription_from_env(cls, value: Any) -> Any:
        value = value or os.environ.get(SUBSCRIPTION_ENV, "").strip()
        if not value:
            raise ValueError(f"required (or set {SUBSCRIPTION_ENV})")
        return value


def from_config(entry: dict[str, Any], base: Path, home: Path) -> Provider:
    """The adapter of one ``kind: azure`` entry. Raises ``pydantic.ValidationError`` naming
    the field of an invalid entry. Makes no request."""
    return AzureProvider(AzureConfig.model_validate(entry))

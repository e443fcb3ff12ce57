"""Azure Spot and pay-as-you-go GPU VMs: Resource SKUs and virtual machines through
azure-mgmt-compute, prices from the Retail Prices API (see :mod:`providers.azure.provider`)."""

from providers.azure.provider import AzureProvider
from providers.azure.settings import AzureLaunchSettings, AzureSettings

__all__ = ["AzureLaunchSettings", "AzureProvider", "AzureSettings"]

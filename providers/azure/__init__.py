"""Azure adapter: Spot and pay-as-you-go GPU VMs.

- :mod:`.client`: Resource Manager calls through azure-mgmt-compute (SKUs, VMs).
- :mod:`.prices`: the Retail Prices API over httpx (no credentials).
- :mod:`.errors`: ARM error codes → :mod:`providers.errors`.
- :mod:`.translate` / :mod:`.families`: pure SKUs and price rows → GPU sizes, offers, prices.
- :mod:`.launch` / :mod:`.instances`: pure launch request → VM body and cloud-init; VM → Instance.
- :mod:`.provider`: :class:`AzureProvider` on :mod:`providers.regional`; :mod:`.settings`
  its config, :mod:`.setup` the ``kind: azure`` entry.
"""

from providers.azure.provider import AzureProvider
from providers.azure.settings import AzureLaunchSettings, AzureSettings

__all__ = ["AzureLaunchSettings", "AzureProvider", "AzureSettings"]

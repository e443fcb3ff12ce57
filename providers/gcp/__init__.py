"""GCP adapter (google-cloud-compute, google-cloud-billing; REST transports): GPU offers with
on-demand and Spot prices from the Cloud Billing Catalog, Spot/on-demand VMs with
deterministic names and ownership labels.

- :mod:`.client`: SDK calls only (paging, retries, operation waits, error mapping).
- :mod:`.machines`: pure machine/accelerator types → GPU shapes.
- :mod:`.pricing`: pure Billing Catalog SKUs → whole-instance prices and offers.
- :mod:`.launch`: pure launch request → ``instances.insert`` body, labels, startup script.
- :mod:`.instances`: pure API instances → :class:`core.models.Instance`.
- :mod:`.provider`: :class:`GcpProvider` on :mod:`providers.regional`.
  :mod:`.settings`: its config; :mod:`.setup`: ``kind: gcp``.
"""

from providers.gcp.provider import GcpProvider
from providers.gcp.settings import GcpLaunchSettings, GcpSettings

__all__ = ["GcpLaunchSettings", "GcpProvider", "GcpSettings"]

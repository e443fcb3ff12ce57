"""``kind: gcp`` for :mod:`scheduler.provider_setup`: the entry's strict model and the
adapter it builds. Example::

    - kind: gcp
      project: my-project
      regions: [us-central1, europe-west4]
      zones: [us-central1-a, us-central1-c, europe-west4-a]   # optional: default every zone
      instance_types: ["g2-*", "a2-*", "n1-standard-*"]       # machine types (N1: the host)
      accelerators: ["nvidia-l4", "nvidia-tesla-*"]
      launch:
        image: projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11-py310
        subnetworks: {us-central1: default}
        service_account: gpu-arbiter-vm@my-project.iam.gserviceaccount.com
        disk_gib: 100
        termination_action: DELETE                           # or STOP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from providers.base import Provider
from providers.gcp.settings import GcpSettings

CREDENTIALS_COME_FROM = (
    "use Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS naming a key or "
    "workload-identity file, 'gcloud auth application-default login', or the service "
    "account of the GCE VM the daemon runs on (metadata server); never the config file, "
    "and they are never logged")


class GcpConfig(GcpSettings):
    """``kind: gcp``: Compute Engine Spot and on-demand GPU VMs (``providers/gcp``); every
    other field is documented on :class:`providers.gcp.settings.GcpSettings`. Credentials:
    :data:`CREDENTIALS_COME_FROM`."""

    kind: str


def from_config(entry: dict[str, Any], base: Path, home: Path) -> Provider:
    """The :class:`providers.gcp.provider.GcpProvider` of one config entry. Raises
    ``pydantic.ValidationError`` naming the field when the entry is invalid; makes no
    request (credentials are resolved at the first call)."""
    from providers.gcp.provider import GcpProvider

    return GcpProvider(GcpConfig.model_validate(entry))

"""Pure translation of Compute Engine machine and accelerator types into the GPU shapes we
offer. No I/O.

Sources (REST JSON, as ``machineTypes.list`` / ``acceleratorTypes.list`` answer per zone):

- ``MachineType``: ``name``, ``guestCpus`` (vCPUs), ``memoryMb`` (MiB, despite the name:
  n1-standard-1 says 3840 for 3.75 GiB), ``accelerators[{guestAcceleratorType,
  guestAcceleratorCount}]`` on accelerator-optimized types (A2, A3, G2, …), whose GPUs come
  with the machine.
- ``AcceleratorType``: ``name`` (``nvidia-tesla-t4``), ``maximumCardsPerInstance``.

Shapes offered:

- every machine type with ``accelerators`` (``a2-highgpu-1g``, ``g2-standard-4``,
  ``a3-highgpu-8g``), under its own name;
- N1 with attached GPUs, for the GPU types N1 takes (:data:`N1_ATTACHABLE`): for 1, 2, 4 and 8
  GPUs (up to ``maximumCardsPerInstance``) on ``n1-standard-{8 × GPUs}``
  (:data:`N1_VCPUS_PER_GPU`), named ``n1-standard-8+nvidia-tesla-t4:1`` (the host, then the
  accelerator and count in SkyPilot's ``{accelerator}:{count}`` notation). Other N1 sizes
  are not offered: one host per GPU count keeps the offer list short, and 8 vCPUs per GPU is
  inside every attachable GPU's vCPU limit (GCP's GPU docs: V100 up to 12 vCPUs per GPU, K80
  8, P100 16, P4 24, T4 48).

GPU models are named as the rest of the project names them (SkyPilot's accelerator names,
AWS's ``GpuInfo`` names): ``nvidia-tesla-t4`` → ``T4``, ``nvidia-h100-80gb`` → ``H100``
(:func:`gpu_model`). VRAM per GPU comes from :data:`providers.catalog.gpus.VRAM_GIB` (the
vendors' figures, which Google's GPU pages repeat: L4 24 GB, A100 40/80 GB, H100 80 GB, …);
a model missing there is not offered. Virtual-workstation types (``…-vws``: a GRID licence
billed on top) are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from providers.catalog.gpus import vram_gib_for
from providers.regional_api import GpuType

MIB_PER_GIB = 1024.0
# Accelerator types N1 machines take as attached GPUs (GCP GPU docs, "N1 general-purpose").
N1_ATTACHABLE = frozenset({"nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100",
                           "nvidia-tesla-p4", "nvidia-tesla-k80"})
N1_VCPUS_PER_GPU = 8
N1_HOST_FAMILY = "n1-standard"
ATTACHED_COUNTS = (1, 2, 4, 8)
# GCP names whose model is not the name without "nvidia-"/"tesla-", upper-cased.
_MODEL_EXCEPTIONS = {"H100-80GB": "H100", "H100-MEGA-80GB": "H100-MEGA", "H200-141GB": "H200"}
# Machine-type prefix → the series its Cloud Billing SKUs name ("G2 Instance Core running in
# …"), longest prefix first. From the SKU descriptions in the catalog; a3-megagpu's SKUs read
# "A3Plus" (its GPU SKU also reads "H100 80GB Plus GPU").
SKU_SERIES: tuple[tuple[str, str], ...] = (
    ("a3-megagpu-", "A3Plus"), ("a3-highgpu-", "A3"), ("a2-", "A2"), ("g2-", "G2"),
    ("n1-", "N1 Predefined"),
)


def gpu_model(accelerator_type: str) -> str | None:
    """The project's GPU model name of a GCP accelerator type (``nvidia-l4`` → ``L4``,
    ``nvidia-a100-80gb`` → ``A100-80GB``), or None for one we do not offer (not NVIDIA, or a
    ``-vws`` virtual workstation)."""
    if not accelerator_type.startswith("nvidia-") or accelerator_type.endswith("-vws"):
        return None
    name = accelerator_type.removeprefix("nvidia-").removeprefix("tesla-").upper()
    return _MODEL_EXCEPTIONS.get(name, name)


def sku_series(machine_type: str) -> str | None:
    """The billing series of ``machine_type`` (:data:`SKU_SERIES`), None when unpriced."""
    return next((series for prefix, series in SKU_SERIES if machine_type.startswith(prefix)),
                None)


def attached_name(machine_type: str, accelerator_type: str, count: int) -> str:
    """``n1-standard-8+nvidia-tesla-t4:1``: the offer name of a host with attached GPUs."""
    return f"{machine_type}+{accelerator_type}:{count}"


def split_name(instance_type: str) -> tuple[str, str | None, int]:
    """An offer name → (machine type, attached accelerator type or None, its count).
    Raises ``ValueError`` naming the name when the attached part is malformed."""
    machine, plus, attached = instance_type.partition("+")
    if not plus:
        return machine, None, 0
    accelerator, _, count = attached.rpartition(":")
    if not accelerator or not count.isdigit() or int(count) < 1:
        raise ValueError(f"instance type {instance_type!r}: expected "
                         "MACHINE+ACCELERATOR:COUNT")
    return machine, accelerator, int(count)


@dataclass(frozen=True)
class GcpShape(GpuType):
    """One GPU shape of one zone: ``machine_type`` with ``accelerator_type`` GPUs, attached
    by the launch (``attached``, N1) or part of the machine type; ``series`` names its
    billing SKUs."""

    machine_type: str = ""
    accelerator_type: str = ""
    attached: bool = False
    series: str = ""


def _hardware(machine: dict[str, Any]) -> tuple[int, float]:
    try:
        return int(machine["guestCpus"]), float(machine["memoryMb"]) / MIB_PER_GIB
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"machine type {machine.get('name')!r}: guestCpus or memoryMb "
                         "missing") from None


def _shape(name: str, machine: dict[str, Any], accelerator: str, count: int,
           attached: bool) -> GcpShape | None:
    model = gpu_model(accelerator)
    vram = vram_gib_for(model) if model else None
    series = sku_series(str(machine.get("name") or ""))
    if model is None or vram is None or series is None or count < 1:
        return None
    vcpus, memory_gib = _hardware(machine)
    return GcpShape(instance_type=name, gpu_model=model, gpu_count=count, vcpus=vcpus,
                    memory_gib=memory_gib, vram_gib=float(vram),
                    machine_type=str(machine["name"]), accelerator_type=accelerator,
                    attached=attached, series=series)


def zone_shapes(machine_types: Iterable[dict[str, Any]],
                accelerator_types: Iterable[dict[str, Any]], *,
                wants_type: Callable[[str], bool] = lambda _: True,
                wants_accelerator: Callable[[str], bool] = lambda _: True,
                ) -> dict[str, GcpShape]:
    """Offer name → :class:`GcpShape` for one zone's machine and accelerator types (see the
    module docstring). ``wants_type`` filters on the machine type (the host, for N1),
    ``wants_accelerator`` on the accelerator type. Malformed entries are skipped."""
    machines = {str(m.get("name")): m for m in machine_types if m.get("name")}
    shapes: dict[str, GcpShape] = {}

    def add(shape: GcpShape | None) -> None:
        if shape is not None and wants_type(shape.machine_type) and wants_accelerator(
                shape.accelerator_type):
            shapes[shape.instance_type] = shape

    for name, machine in machines.items():
        accelerators = machine.get("accelerators") or []
        if len(accelerators) != 1:  # none (a CPU type), or a mix we cannot name one model for
            continue
        try:
            add(_shape(name, machine, str(accelerators[0].get("guestAcceleratorType") or ""),
                       int(accelerators[0].get("guestAcceleratorCount") or 0), False))
        except ValueError:
            continue
    for accelerator in accelerator_types:
        kind = str(accelerator.get("name") or "")
        if kind not in N1_ATTACHABLE:
            continue
        most = int(accelerator.get("maximumCardsPerInstance") or 0)
        for count in (n for n in ATTACHED_COUNTS if n <= most):
            host = f"{N1_HOST_FAMILY}-{N1_VCPUS_PER_GPU * count}"
            if host in machines:
                try:
                    add(_shape(attached_name(host, kind, count), machines[host], kind, count,
                               True))
                except ValueError:
                    continue
    return shapes

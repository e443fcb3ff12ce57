"""Which GPU an Azure VM size carries: the Resource SKUs API gives the number of GPUs (the
``GPUs`` capability) but not their model, so the model comes from the size's ``family``.

Sources: the family names as the Resource SKUs API spells them (its case varies, so lookups
are case-insensitive) and the model of each family are from the Azure GPU size pages
(learn.microsoft.com ``virtual-machines/sizes/gpu-accelerated/<series>``) as SkyPilot's
``sky/catalog/data_fetchers/fetch_azure.py`` lists them; VRAM per GPU is the one table of
:data:`providers.catalog.gpus.VRAM_GIB`, keyed by the model names used here (NC H100 v5 and
NCC H100 v5 carry the 94 GB H100 NVL, not the 80 GB SXM of ND H100 v5).
"""

from __future__ import annotations

from providers.catalog.gpus import vram_gib_for

# SKU ``family`` (lower case) → GPU model (a key of providers.catalog.gpus.VRAM_GIB).
GPU_BY_FAMILY: dict[str, str] = {
    "standardncfamily": "K80",
    "standardncpromofamily": "K80",
    "standardncsv2family": "P100",
    "standardncsv3family": "V100",
    "standardndsfamily": "P40",
    "standardndsv2family": "V100-32GB",
    "standardncasv3_t4family": "T4",
    "standardncadsa10v4family": "A10",
    "standardnvadsa10v5family": "A10",
    "standardncadsa100v4family": "A100-80GB",
    "standardndasv4_a100family": "A100",
    "standardndamsv4_a100family": "A100-80GB",
    "standardncadsh100v5family": "H100-NVL",
    "standardnccads2023family": "H100-NVL",
    "standardndsh100v5family": "H100",
    "standardndisrh200v5family": "H200",
    "standardndisv5mi300xfamily": "MI300X",
    "standardnvsv3family": "M60",
}

# Sizes whose SKU entry lacks the ``GPUs`` capability although they have GPUs (the ND MI300X v5
# size page: 8 GPUs per VM).
GPU_COUNT_BY_SIZE: dict[str, int] = {"Standard_ND96is_MI300X_v5": 8}

# Sizes that carry part of one GPU (the NVadsA10 v5 size page: 1/6, 1/3 and 1/2 of an A10):
# their VRAM per GPU is the partition's, GiB. (NVv4's MI25 partitions are left out of the
# family table: the SKU reports no fraction to size them by.)
PARTIAL_GPU_VRAM_GIB: dict[str, float] = {
    "Standard_NV6ads_A10_v5": 4.0, "Standard_NV12ads_A10_v5": 8.0,
    "Standard_NV18ads_A10_v5": 12.0,
}


def gpu_model(family: str) -> str | None:
    """The GPU model of a SKU ``family`` (``StandardNCASv3_T4Family`` → ``T4``), or None when
    the family is not a GPU family this table knows."""
    return GPU_BY_FAMILY.get(family.replace(" ", "").lower())


def vram_gib(size: str, model: str) -> float | None:
    """VRAM per GPU, GiB, of ``model`` in VM size ``size`` (a partition's for partial-GPU
    sizes), or None when the model's memory is unknown."""
    return PARTIAL_GPU_VRAM_GIB.get(size) or vram_gib_for(model)

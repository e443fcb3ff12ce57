"""Hardware tables we maintain: GPU memory per GPU model, and the GPU instance types of AWS
families that the public price dumps name but the shared catalog extract lacks.

Sources: the vendors' product pages (NVIDIA, AMD) for memory sizes, in GiB as the GPU reports
it rounded to the marketed size (catalog ``GpuInfo`` values, when present, win: AWS reports an
A10G as 22,888 MiB); the AWS EC2 accelerated-computing instance type pages for the families.
"""

from __future__ import annotations

# GPU memory per GPU, GiB, keyed by the SkyPilot accelerator name (upper-cased for lookup).
VRAM_GIB: dict[str, float] = {
    "K80": 12, "M60": 8, "P4": 8, "P40": 24, "P100": 16, "V100": 16, "V100-32GB": 32,
    "T4": 16, "T4G": 16, "A10": 24, "A10G": 24, "A16": 16, "A30": 24, "A40": 48,
    "A100": 40, "A100-80GB": 80, "L4": 24, "L40": 48, "L40S": 48,
    "H100": 80, "H100-MEGA": 80, "H100-NVL": 94, "H200": 141, "GH200": 96, "B200": 180,
    "A4000": 16, "A5000": 24, "A6000": 48, "RTXA4000": 16, "RTXA5000": 24, "RTXA6000": 48,
    "RTX6000": 24, "RTX6000-ADA": 48, "RTX5880-ADA": 48, "RTXPRO6000WS": 96,
    "RTX3060": 12, "RTX3070": 8, "RTX3080": 10, "RTX3090": 24, "RTX4060": 8, "RTX4070": 12,
    "RTX4080": 16, "RTX4090": 24, "RTX5070": 12, "RTX5080": 16, "RTX5090": 32,
    "MI25": 16, "MI50": 16, "MI100": 32, "MI210": 64, "MI250X": 128, "MI300X": 192,
    "RADEON-PRO-V520": 8, "V520": 8,
}


def vram_gib_for(gpu_model: str) -> float | None:
    """GiB per GPU of ``gpu_model`` from :data:`VRAM_GIB` (case-insensitive), else ``None``."""
    return VRAM_GIB.get(gpu_model.strip().upper())


def memory_variant(gpu_model: str, vram_gib: float) -> str:
    """``gpu_model`` named by its memory variant when the name alone means another size:
    ``("A100", 79.6)`` → ``"A100-80GB"``, ``("V100", 32)`` → ``"V100-32GB"``; the name as given
    when its :data:`VRAM_GIB` size is within 10 % of ``vram_gib``, when no ``NAME-<N>GB``
    variant matches, or for a model the table lacks. Marketplaces (Vast.ai) name both sizes of
    these boards alike; the GPU table's speeds differ by variant."""
    base = VRAM_GIB.get(gpu_model.strip().upper())
    if base is None or not vram_gib > 0 or abs(base - vram_gib) <= 0.1 * vram_gib:
        return gpu_model
    prefix = gpu_model.strip().upper() + "-"
    for name, size in VRAM_GIB.items():
        if name.startswith(prefix) and name.endswith("GB") and abs(size - vram_gib) <= 0.1 * vram_gib:
            return gpu_model.strip() + name[len(prefix) - 1:]
    return gpu_model


# AWS GPU instance types: type → (GPU model, GPUs, vCPUs, memory GiB).
_AWS_SIZES: dict[str, tuple[str, list[tuple[str, int, int, float]]]] = {
    "p2": ("K80", [("xlarge", 1, 4, 61), ("8xlarge", 8, 32, 488), ("16xlarge", 16, 64, 732)]),
    "p3": ("V100", [("2xlarge", 1, 8, 61), ("8xlarge", 4, 32, 244), ("16xlarge", 8, 64, 488)]),
    "p3dn": ("V100-32GB", [("24xlarge", 8, 96, 768)]),
    "p4d": ("A100", [("24xlarge", 8, 96, 1152)]),
    "p4de": ("A100-80GB", [("24xlarge", 8, 96, 1152)]),
    "g3s": ("M60", [("xlarge", 1, 4, 30.5)]),
    "g3": ("M60", [("4xlarge", 1, 16, 122), ("8xlarge", 2, 32, 244), ("16xlarge", 4, 64, 488)]),
    "g4dn": ("T4", [("xlarge", 1, 4, 16), ("2xlarge", 1, 8, 32), ("4xlarge", 1, 16, 64),
                    ("8xlarge", 1, 32, 128), ("16xlarge", 1, 64, 256), ("12xlarge", 4, 48, 192),
                    ("metal", 8, 96, 384)]),
    "g4ad": ("V520", [("xlarge", 1, 4, 16), ("2xlarge", 1, 8, 32), ("4xlarge", 1, 16, 64),
                      ("8xlarge", 2, 32, 128), ("16xlarge", 4, 64, 256)]),
    "g5": ("A10G", [("xlarge", 1, 4, 16), ("2xlarge", 1, 8, 32), ("4xlarge", 1, 16, 64),
                    ("8xlarge", 1, 32, 128), ("16xlarge", 1, 64, 256), ("12xlarge", 4, 48, 192),
                    ("24xlarge", 4, 96, 384), ("48xlarge", 8, 192, 768)]),
    "g5g": ("T4G", [("xlarge", 1, 4, 8), ("2xlarge", 1, 8, 16), ("4xlarge", 1, 16, 32),
                    ("8xlarge", 1, 32, 64), ("16xlarge", 2, 64, 128), ("metal", 2, 64, 128)]),
}

AWS_GPU_TYPES: dict[str, dict[str, object]] = {
    f"{family}.{size}": {"gpu_model": model, "gpu_count": count, "vcpus": vcpus,
                         "memory_gib": float(mem), "vram_gib": float(VRAM_GIB[model.upper()])}
    for family, (model, sizes) in _AWS_SIZES.items()
    for size, count, vcpus, mem in sizes
}

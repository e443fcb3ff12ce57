"""Inputs for the Vast.ai contract tests and benchmark: the observed search row of
``shared/data/api_examples/vastai/search_offers_cli_raw_observed.json`` (read from the
shared data folder, never copied) and rows derived from it.

:func:`catalogue` makes a marketplace of ``n`` asks in the observed row's shape: hosts of a
few GPU models Vast lists (names as ``gpu_name`` spells them, ``gpu_ram`` as nvidia-smi
reports it), in several countries, with 1, 2, 4 or 8 GPUs, reliabilities 0.90–0.999, and
prices around each model's level (synthetic, seeded).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from core.config import shared_data_dir

EXAMPLES = shared_data_dir() / "api_examples" / "vastai"
OFFER_FILE = EXAMPLES / "search_offers_cli_raw_observed.json"
needs_examples = pytest.mark.skipif(not OFFER_FILE.is_file(),
                                    reason=f"Vast examples not found at {EXAMPLES} (set GA_DATA_DIR)")

# gpu_name → (gpu_ram MiB per GPU, on-demand USD/hour per GPU): memory as the cards report it,
# price levels of the order Vast lists (synthetic).
MODELS: dict[str, tuple[int, float]] = {
    "RTX 4090": (24564, 0.35), "RTX 3090": (24576, 0.2), "RTX 5090": (32607, 0.55),
    "H100 SXM": (81559, 1.9), "A100 SXM4": (81920, 1.0), "RTX A6000": (49140, 0.45),
    "Tesla V100": (16384, 0.18), "RTX 6000Ada": (49140, 0.8),
}
PLACES = ["Guangxi, CN", "California, US", "Texas, US", "Quebec, CA", "Bavaria, DE", "FR",
          "Ontario, CA", "Sichuan, CN", "Tokyo, JP", "South Korea, KR"]


def example(name: str) -> Any:
    return json.loads((EXAMPLES / name).read_text())


def observed_row() -> dict[str, Any]:
    """The one real search row (RTX 4090, Guangxi CN, min_bid 0.2, dph_total 0.2467)."""
    return dict(example(OFFER_FILE.name)[0])


def ask(**changes: Any) -> dict[str, Any]:
    """The observed row with ``changes``."""
    return observed_row() | changes


def catalogue(n: int, *, seed: int = 7, first_id: int = 11_000_000) -> list[dict[str, Any]]:
    """``n`` asks (see the module docstring), ids and machine ids distinct."""
    rng = random.Random(seed)
    base = observed_row()
    rows = []
    for i in range(n):
        name = rng.choice(list(MODELS))
        ram, per_gpu = MODELS[name]
        count = rng.choice([1, 1, 2, 4, 8])
        dph = round(per_gpu * count * rng.uniform(0.7, 1.4), 4)
        rows.append(base | {
            "id": first_id + i, "ask_contract_id": first_id + i, "machine_id": 20_000 + i,
            "host_id": 100_000 + i // 3, "gpu_name": name, "num_gpus": count, "gpu_ram": ram,
            "gpu_total_ram": ram * count, "cpu_cores_effective": float(8 * count),
            "cpu_ram": 32_768 * count, "dph_total": dph,
            "min_bid": round(dph * rng.uniform(0.35, 0.8), 4),
            "reliability": round(rng.uniform(0.9, 0.999), 4),
            "geolocation": rng.choice(PLACES), "score": rng.uniform(50, 300),
        })
    return rows


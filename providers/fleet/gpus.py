"""A host's GPUs from ``nvidia-smi``'s CSV, or from its config. Pure: no SSH.

Queries (NVIDIA's ``nvidia-smi --help-query-gpu`` / ``--help-query-compute-apps``)::

    nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu \\
               --format=csv,noheader,nounits
    0, GPU-5c5a1f1e-..., NVIDIA GeForce RTX 4090, 24564, 1, 0      (MiB, MiB, %)

    nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader
    GPU-5c5a1f1e-..., 4242, 20480 MiB

A GPU is **busy** when a compute process runs on it that is not ours (the caller passes the
GPUs its own instances hold), or when more of its memory is used than
:data:`BUSY_MEMORY_FRACTION` (processes in other containers are not listed by
``nvidia-smi``, their memory is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from providers.catalog.gpus import VRAM_GIB, vram_gib_for
from providers.fleet.settings import GpuConfig

# Memory in use past this share of a GPU's memory marks it busy though no process shows.
BUSY_MEMORY_FRACTION = 0.10
_VENDOR_WORDS = {"NVIDIA", "GEFORCE", "TESLA", "QUADRO", "GENERATION", "PCIE", "SXM", "SXM2",
                 "SXM3", "SXM4", "SXM5", "HBM3", "HBM3E"}
_MEMORY_RE = re.compile(r"^(\d+)GB\Z")
# A host with more GPUs than this is not one answer of nvidia-smi (the largest servers
# have 16); a configured ``gpus`` entry has the same bound.
MAX_GPUS = 64
# Text from a host (a line, a stderr) is shown in errors up to this many characters.
SHOWN_CHARS = 200


@dataclass(frozen=True)
class HostGpu:
    """One GPU of a host: ``index`` (what ``CUDA_VISIBLE_DEVICES`` names), ``model`` (the
    project's name), ``vram_gib`` per GPU, ``uuid`` (``None`` when configured), and how much
    of it is used now (MiB, ``None`` unknown), ``foreign`` = a process not started by
    gpu-arbiter uses it."""

    index: int
    model: str
    vram_gib: float
    uuid: str | None = None
    memory_used_mib: float | None = None
    utilization_pct: float | None = None
    foreign: bool = False


def normalize_model(name: str) -> str:
    """The project's GPU model name for what a driver reports, e.g. ``NVIDIA GeForce RTX
    4090`` → ``RTX4090``, ``NVIDIA A100-SXM4-80GB`` → ``A100-80GB``, ``Tesla V100-SXM2-16GB``
    → ``V100``, ``NVIDIA RTX 6000 Ada Generation`` → ``RTX6000-ADA``, ``NVIDIA H100 NVL`` →
    ``H100-NVL``. A model the catalog does not know keeps its words, upper-cased and joined
    (``GTX1080TI``); never contains ``/``, ``.`` or spaces."""
    tokens = [t for t in re.split(r"[\s/_-]+", name.upper()) if t]
    memory = next((int(m.group(1)) for t in tokens if (m := _MEMORY_RE.match(t))), None)
    words = [t for t in tokens if t not in _VENDOR_WORDS and not _MEMORY_RE.match(t)]
    if not words:
        return "UNKNOWN"
    base = words[0]
    rest = words[1:]
    if base == "RTX" and rest:
        base, rest = base + rest[0], rest[1:]
    for suffix in ("ADA", "NVL", "MEGA"):
        if suffix in rest and f"{base}-{suffix}" in VRAM_GIB:
            return f"{base}-{suffix}"
    if memory is not None and f"{base}-{memory}GB" in VRAM_GIB:
        return f"{base}-{memory}GB"
    if base in VRAM_GIB:
        return base
    return re.sub(r"[^A-Z0-9-]", "", "".join([base, *rest])) or "UNKNOWN"


def _number(text: str) -> float | None:
    text = text.strip().removesuffix("MiB").strip()
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def short(text: str) -> str:
    """``text`` (a host's output) cut to :data:`SHOWN_CHARS` characters for an error
    message, the cut said."""
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def _shown(line: str) -> str:
    return repr(short(line))


def parse_gpus(csv_text: str, apps_text: str, ours: set[int] = frozenset()) -> list[HostGpu]:
    """GPUs from the two queries' output (module docstring); ``ours``: indices held by our
    own instances (their processes do not make a GPU foreign-busy). Raises ``ValueError``
    naming the line (cut to :data:`SHOWN_CHARS` characters) when a GPU line does not have
    six fields or a bad index, when an index or uuid repeats (the output is not one
    answer, and counting it would offer GPUs the host lacks), or past :data:`MAX_GPUS`."""
    busy_uuids = {line.split(",")[0].strip() for line in apps_text.splitlines() if line.strip()}
    out: list[HostGpu] = []
    for line in csv_text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 6 or not fields[0].isdigit():
            raise ValueError(f"nvidia-smi --query-gpu line {_shown(line)}: want 6 fields "
                             "(index, uuid, name, memory.total, memory.used, utilization.gpu)")
        index, uuid, name = int(fields[0]), fields[1], fields[2]
        twin = next((g for g in out if g.index == index or g.uuid == uuid), None)
        if twin is not None:
            what = f"index {index}" if twin.index == index else f"uuid {_shown(uuid)}"
            raise ValueError(f"nvidia-smi --query-gpu line {_shown(line)}: GPU {what} is "
                             "listed twice")
        if len(out) == MAX_GPUS:
            raise ValueError(f"nvidia-smi --query-gpu lists more than {MAX_GPUS} GPUs")
        total, used, util = (_number(f) for f in fields[3:])
        model = normalize_model(name)
        vram = vram_gib_for(model) or (round(total / 1024, 1) if total else 0.0)
        memory_busy = bool(total and used is not None and used > BUSY_MEMORY_FRACTION * total)
        foreign = index not in ours and (uuid in busy_uuids or memory_busy)
        out.append(HostGpu(index, model, float(vram), uuid, used, util, foreign))
    return out


def configured_gpus(config: list[GpuConfig]) -> list[HostGpu]:
    """Indices 0.. in the configured order. Raises ``ValueError`` when a model's VRAM is
    neither configured nor in the catalog."""
    out: list[HostGpu] = []
    for spec in config:
        model = normalize_model(spec.model)
        vram = spec.vram_gib or vram_gib_for(model)
        if vram is None:
            raise ValueError(f"gpus: model {spec.model!r} is not in the catalog; set vram_gib")
        out += [HostGpu(len(out) + i, model, float(vram)) for i in range(spec.count)]
    return out

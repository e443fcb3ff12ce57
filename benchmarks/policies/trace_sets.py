"""The trace sets of the policy benchmark, and the data that was looked at and left out.

Every trace is read with **1 = available, 0 = preempted/unavailable** (a count above 1, in
Bamboo's step traces, is the instances running; a 1-node job can run while it is >= 1) and
sampled at the start of each 600 s tick by the simulator (``scheduler/simulator/market.py``).

Sets used (a job of 48 h of compute with deadlines up to 80 h needs >= 80 h of trace after a
start):

- ``cbl-availability``: ``cbl_spot_traces/availability/1-node/aws-10-26-2022``, 13 days of
  p2/p3 1× and 8× K80/V100 in us-west-2a/b, one probe every 600 s. Single-zone: each trace;
  multi-zone: 2a + 2b of one type.
- ``cbl-gpu-preemption``: ``cbl_spot_traces/preemption/1-node/aws-04-22-2023``, 7.4 days of
  p3.2xlarge (1× V100) in us-east-1c/1f and us-west-2b/2c, one probe every 32 s. Single-zone:
  each zone; multi-zone: the two zones of one region.
- ``bamboo``: ``bamboo_aws_2020-11/aws-spot-instances-p2-xlarge-2020-11-20-to-2020-11-23.csv``
  (hours), the only Bamboo trace longer than 80 h (88.8 h): running p2.xlarge spot instances of
  a group of up to 16; a 1-node job runs while one is.

Left out (:func:`left_out` measures them): the other Bamboo traces and every "Training on a
Dime" log are shorter than 80 h (:mod:`benchmarks.policies.toad` parses the logs); the CPU-VM
preemption traces (``aws-04-19-2023``, ``gcp-04-30-2023``) are held out for tuning the
policy's knobs (``heldout_tuning.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config import shared_data_dir
from providers.replay.timeline import AvailabilityTrace, load_trace

CBL = "traces/cbl_spot_traces"
AVAIL_DIR = f"{CBL}/availability/1-node/aws-10-26-2022"
GPU_PREEMPT_DIR = f"{CBL}/preemption/1-node/aws-04-22-2023"
BAMBOO_DIR = "traces/bamboo_aws_2020-11"
BAMBOO_LONG = "aws-spot-instances-p2-xlarge-2020-11-20-to-2020-11-23.csv"
TOAD_DIR = "traces/training_on_a_dime_2020-03/logs"
TOAD_LOGS = ("aws/availability/persistent_2020-03-15.out",
             "gcp/availability/persistent_2020-03-01.out",
             "gcp/availability/persistent_2020-03-04.out")
TICK_S = 600.0
SETS = ("cbl-availability", "cbl-gpu-preemption", "bamboo")
SET_SOURCES = {
    "cbl-availability": f"`{AVAIL_DIR.removeprefix('traces/')}` (probe 600 s)",
    "cbl-gpu-preemption": f"`{GPU_PREEMPT_DIR.removeprefix('traces/')}` (probe 32 s)",
    "bamboo": f"`{BAMBOO_DIR.removeprefix('traces/')}/{BAMBOO_LONG}` (step trace)",
}


@dataclass(frozen=True)
class Setting:
    """One market of the benchmark: ``files`` are ``(zone, path under the data folder)``, one
    spot + on-demand offer per zone."""

    trace_set: str
    mode: str            # "single" or "multi"
    name: str
    files: tuple[tuple[str, str], ...]
    gpu: str = "V100"

    @property
    def key(self) -> str:
        return f"{self.trace_set}/{self.name}"


def settings() -> list[Setting]:
    """Every setting of every set, in report order."""
    out = []
    for t in ("k80_1", "k80_8", "v100_1", "v100_8"):
        gpu = t.split("_")[0].upper()
        out += [Setting("cbl-availability", "single", f"us-west-2{z}_{t}",
                        ((f"us-west-2{z}", f"{AVAIL_DIR}/us-west-2{z}_{t}.json"),), gpu)
                for z in "ab"]
        out.append(Setting("cbl-availability", "multi", f"us-west-2a+b_{t}",
                           tuple((f"us-west-2{z}", f"{AVAIL_DIR}/us-west-2{z}_{t}.json")
                                 for z in "ab"), gpu))
    for region, zones in (("us-east-1", "cf"), ("us-west-2", "bc")):
        files = tuple((f"{region}{z}", f"{GPU_PREEMPT_DIR}/{region}{z}_v100_1.json")
                      for z in zones)
        out += [Setting("cbl-gpu-preemption", "single", f"{zone}_v100_1", ((zone, path),))
                for zone, path in files]
        out.append(Setting("cbl-gpu-preemption", "multi", f"{region}{zones[0]}+{zones[1]}_v100_1",
                           files))
    out.append(Setting("bamboo", "single", "p2-xlarge_2020-11-20",
                       (("us-east-1", f"{BAMBOO_DIR}/{BAMBOO_LONG}"),), "K80"))
    return out


def load(path: str) -> AvailabilityTrace:
    """The trace at ``path`` (under the data folder); Bamboo CSVs in hours."""
    full = shared_data_dir() / path
    if full.suffix == ".csv":
        return load_trace(full, time_unit="hours", gap_seconds=TICK_S)
    return load_trace(full)


def _bamboo_unit(name: str) -> str:
    # the files without ``_scaled`` count seconds, except the merged 3-day one (hours)
    return "hours" if "_scaled" in name or name == BAMBOO_LONG else "seconds"


def left_out() -> list[str]:
    """One Markdown bullet per file looked at and not used, with its length; raises nothing
    (a missing file is said so)."""
    from benchmarks.policies import toad

    root = shared_data_dir()
    out = []
    for name in sorted(p.name for p in (root / BAMBOO_DIR).glob("*.csv")):
        if name == BAMBOO_LONG:
            continue
        tr = load_trace(root / BAMBOO_DIR / name, time_unit=_bamboo_unit(name),
                        gap_seconds=TICK_S)
        out.append(f"- Bamboo `{name}`: {tr.duration_s / 3600:.1f} h, shorter than 80 h")
    for rel in TOAD_LOGS:
        path = root / TOAD_DIR / rel
        if not path.is_file():
            out.append(f"- Training on a Dime `{rel}`: absent")
            continue
        log, trs = toad.load(path, TICK_S)
        slots = ", ".join(f"{k} {sum(t.data) / len(t.data):.0%} up"
                          for k, t in sorted(trs.items()))
        out.append(f"- Training on a Dime `{rel}`: {log.span_s / 3600:.1f} h, shorter than 80 h "
                   f"({len(trs)} slots: {slots}"
                   + (f"; {log.skipped} lines of slots never created, type unknown"
                      if log.skipped else "") + ")")
    for folder in ("aws-04-19-2023", "gcp-04-30-2023"):
        d = root / CBL / "preemption/1-node" / folder
        lens = sorted({round(load_trace(p).duration_s / 3600, 1) for p in d.glob("*.json")})
        out.append(f"- CBL CPU-VM preemption `{folder}` ({len(list(d.glob('*.json')))} zones, "
                   f"{'/'.join(map(str, lens))} h): held out, the knobs are tuned on it "
                   "(`TUNING.md`)")
    return out


def describe(trace: AvailabilityTrace, tick_s: float = TICK_S) -> dict:
    """Length (h), fraction available and drops of ``trace``, raw and at the tick starts."""
    import numpy as np

    raw = np.asarray(trace.data) >= 1
    times = np.arange(0.0, trace.duration_s, tick_s)
    sampled = raw[(times // trace.gap_seconds).astype(int) % len(raw)]
    drops = lambda a: int((a[:-1] & ~a[1:]).sum())  # noqa: E731
    return {"hours": trace.duration_s / 3600, "up_raw": float(raw.mean()),
            "up_ticks": float(sampled.mean()), "drops_raw": drops(raw),
            "drops_ticks": drops(sampled)}

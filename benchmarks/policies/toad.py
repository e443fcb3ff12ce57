"""Availability traces from the "Training on a Dime" logs (``training_on_a_dime_2020-03/logs``).

Those logs come from a prober that kept one spot/preemptible instance per (zone, GPU type, GPU
count) *slot* alive and looked at it every 10-15 minutes. Lines look like::

    [2020-03-15T10:07:33.000Z] Created instance i-0ad1... with 1 GPU(s) of type v100 in zone us-east-1b
    [2020-03-15T10:21:22.000Z] Instance i-0ad1... running in zone us-east-1b
    [2020-03-01T10:27:04.000Z] Instance instance0 not running in zone us-west1-b
    [2020-03-01T10:12:22.000Z] Instance instance1 creation failed
    [2020-03-15T10:11:21.000Z] Instance with 8 GPU(s) of type k80 creation failed
    [2020-03-01T10:27:09.000Z] Successfully deleted instance instance0

Each line is an observation of one slot: *created* and *running* say spot capacity was there
(1), *not running* (preempted) and *creation failed* say it was not (0); *deleted* is the
prober cleaning up after a preemption and says nothing. A slot is known by its instance id
(the GCP logs reuse a name per slot; AWS ids change at every re-creation, so an id is mapped
to the slot of its ``Created`` line). A failure that names no instance (AWS) names the GPU
type and count instead: the prober walks the zones in turn, so it is the slot of that type
and count in the zone of the line before it. Failures of a name never created in the log
have no known GPU type and are skipped.

:func:`traces` turns the observations into :class:`AvailabilityTrace` s on a fixed tick
(**1 = available, 0 = not**, the ``cbl_spot_traces`` polarity): tick ``i`` holds the last
observation at or before the tick's start, and ticks before a slot's first observation are 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from providers.replay.timeline import AvailabilityTrace, TraceError

_STAMP = r"\[(?P<at>[^\]]+)\] "
_CREATED = re.compile(_STAMP + r"Created instance (?P<id>\S+) with (?P<n>\d+) GPU\(s\) of type "
                      r"(?P<gpu>\S+) in zone (?P<zone>\S+)$")
_RUNNING = re.compile(_STAMP + r"Instance (?P<id>\S+) (?P<not>not )?running in zone (?P<zone>\S+)$")
_FAILED_ID = re.compile(_STAMP + r"Instance (?P<id>\S+) creation failed$")
_FAILED_TYPE = re.compile(_STAMP + r"Instance with (?P<n>\d+) GPU\(s\) of type (?P<gpu>\S+) "
                          r"creation failed$")
_DELETED = re.compile(_STAMP + r"Successfully deleted instance \S+$")


@dataclass(frozen=True)
class Slot:
    """One probed (zone, GPU type, GPU count)."""

    zone: str
    gpu: str
    count: int

    @property
    def name(self) -> str:
        """``<zone>_<gpu>_<count>``, e.g. ``us-west1-b_nvidia-tesla-v100_1``."""
        return f"{self.zone}_{self.gpu}_{self.count}"


@dataclass(frozen=True)
class Log:
    """A parsed log: ``observations[slot]`` is ``[(seconds since the log's first line,
    1 or 0), ...]`` in time order; ``span_s`` the seconds from its first line to its last."""

    observations: dict[Slot, list[tuple[float, int]]]
    span_s: float
    skipped: int   # observation lines whose slot is unknown (never created in the log)


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def parse(text: str, source: str = "<log>") -> Log:
    """Parse one log's text.

    Raises:
        TraceError: a line that is none of the known kinds (naming ``source`` and the line
            number), times going backwards, or no line at all.
    """
    slots: dict[str, Slot] = {}          # instance id -> slot
    zone = None                          # zone of the last line that named one
    obs: dict[Slot, list[tuple[float, int]]] = {}
    first = last = None
    skipped = 0
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        m = (_CREATED.match(line) or _RUNNING.match(line) or _FAILED_ID.match(line)
             or _FAILED_TYPE.match(line) or _DELETED.match(line))
        if m is None:
            raise TraceError(f"{source}:{number}: not a Training-on-a-Dime log line: {line!r}")
        at = _seconds(m["at"])
        if last is not None and at < last:
            raise TraceError(f"{source}:{number}: time goes backwards")
        first = at if first is None else first
        last = at
        groups = m.groupdict()
        slot = None
        if m.re is _CREATED:
            slot = Slot(m["zone"], m["gpu"], int(m["n"]))
            slots[m["id"]] = slot
            up = 1
        elif m.re is _RUNNING:
            slot = slots.get(m["id"])
            up = 0 if groups["not"] else 1
        elif m.re is _FAILED_ID:
            slot, up = slots.get(m["id"]), 0
        elif m.re is _FAILED_TYPE:
            slot, up = (Slot(zone, m["gpu"], int(m["n"])) if zone else None), 0
        else:
            continue
        zone = groups.get("zone") or zone
        if slot is None:
            skipped += 1
            continue
        obs.setdefault(slot, []).append((at, up))
    if first is None:
        raise TraceError(f"{source}: empty log")
    return Log({s: [(t - first, up) for t, up in v] for s, v in obs.items()}, last - first,
               skipped)


def traces(log: Log, gap_seconds: float = 600.0, source: str = "") -> dict[str, AvailabilityTrace]:
    """One trace per slot (by :attr:`Slot.name`), ``ceil(span / gap)`` ticks each (>= 1)."""
    if not gap_seconds > 0:
        raise TraceError(f"gap_seconds: got {gap_seconds!r}; must be > 0")
    ticks = max(1, -int(-log.span_s // gap_seconds))
    out = {}
    for slot, seen in log.observations.items():
        data, j, state = [], 0, 0
        for i in range(ticks):
            while j < len(seen) and seen[j][0] <= i * gap_seconds:
                state = seen[j][1]
                j += 1
            data.append(state)
        out[slot.name] = AvailabilityTrace(tuple(data), float(gap_seconds),
                                           f"{source}#{slot.name}")
    return out


def load(path: str | Path, gap_seconds: float = 600.0) -> tuple[Log, dict[str, AvailabilityTrace]]:
    """Parse the log at ``path`` and build its traces (see :func:`traces`).

    Raises:
        TraceError: unreadable or malformed log (as :func:`parse`).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read log: {exc}") from None
    log = parse(text, str(path))
    return log, traces(log, gap_seconds, str(path))

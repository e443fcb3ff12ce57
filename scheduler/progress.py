"""Report a job's progress to its gpu-arbiter agent (optional; any language can do the same).

The contract is a file, not this module. The agent exports ``SCHED_PROGRESS_FILE`` to the job:
a path in the agent's own state folder (never in the checkpoint folder, so a restore never
replaces it). The job appends one JSON object per line::

    {"samples": 128000, "total": 2880000, "t": 1764616800.25}

- exactly one of ``samples``, ``tokens`` or ``steps``: the units done **in all, over the whole
  job** (cumulative across restarts and migrations, not per attempt), a finite number ≥ 0;
- ``total`` (optional): the job's total in the same unit, > 0;
- ``t`` (optional): unix seconds when the point was true (default: when the agent read it);
- any other key is ignored.

Append whole lines, each in one ``write`` (a reader may otherwise see half a line, which it
keeps until the rest arrives). Writing every few seconds is plenty; the agent forwards the first
point of the attempt and the latest with each report, and the daemon turns them into the job's
measured throughput on that GPU model. What the agent does with a malformed file is documented
in :mod:`scheduler.agent.progress` (it never fails the job).

From Python::

    from scheduler import progress
    progress.report(samples=step * batch, total=steps * batch)

:func:`report` is a no-op when ``SCHED_PROGRESS_FILE`` is unset (the script runs outside the
scheduler) and never raises for an unwritable file. This module imports nothing outside the
standard library, so a job may also copy it.
"""

from __future__ import annotations

import json
import math
import os
import time

ENV_VAR = "SCHED_PROGRESS_FILE"
UNITS = ("samples", "tokens", "steps")


def progress_line(samples: float | None = None, tokens: float | None = None,
                  steps: float | None = None, total: float | None = None,
                  t: float | None = None) -> str:
    """One progress line (with its newline) in the format above; ``t`` defaults to now.

    Raises ``ValueError`` unless exactly one of ``samples``/``tokens``/``steps`` is given as a
    finite number ≥ 0, ``total`` (if given) is finite and > 0 and ``t`` (if given) is finite.
    """
    given = {name: value for name, value in
             (("samples", samples), ("tokens", tokens), ("steps", steps)) if value is not None}
    if len(given) != 1:
        raise ValueError(f"give exactly one of {', '.join(UNITS)}; got {sorted(given) or 'none'}")
    [(unit, done)] = given.items()
    if not _finite(done) or done < 0:
        raise ValueError(f"{unit} must be a finite number >= 0, got {done!r}")
    line: dict[str, float] = {unit: done}
    if total is not None:
        if not _finite(total) or total <= 0:
            raise ValueError(f"total must be a finite number > 0, got {total!r}")
        line["total"] = total
    when = time.time() if t is None else t
    if not _finite(when):
        raise ValueError(f"t must be finite unix seconds, got {t!r}")
    line["t"] = round(when, 3)
    return json.dumps(line, separators=(",", ":")) + "\n"


def report(samples: float | None = None, tokens: float | None = None,
           steps: float | None = None, total: float | None = None,
           t: float | None = None) -> bool:
    """Append one progress point to ``$SCHED_PROGRESS_FILE``; ``True`` when it was written.

    A no-op (``False``) when the variable is unset or empty, or when the file cannot be
    written (an ``OSError`` is swallowed: progress reports must never stop training). Raises
    ``ValueError`` for arguments :func:`progress_line` refuses (a bug in the caller).
    """
    line = progress_line(samples=samples, tokens=tokens, steps=steps, total=total, t=t)
    path = os.environ.get(ENV_VAR)
    if not path:
        return False
    data = line.encode()
    try:
        # O_APPEND and a single write: the whole line lands at the end, after any earlier one.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        return os.write(fd, data) == len(data)
    except OSError:
        return False
    finally:
        os.close(fd)


def _finite(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))

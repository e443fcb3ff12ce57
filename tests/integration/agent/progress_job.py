"""A job for the progress tests: reports ``PROGRESS_POINTS`` points of 64 samples each through
:mod:`scheduler.progress` (total = points × 64), ``PROGRESS_STEP_S`` seconds apart, with a
garbage line and a half-written line in between, then exits 0. ``PROGRESS_POINTS=0``: reports
nothing. Prints where its progress file and checkpoint folder are."""

import os
import time

from scheduler import progress

points = int(os.environ.get("PROGRESS_POINTS", "5"))
step_s = float(os.environ.get("PROGRESS_STEP_S", "0.5"))
print(f"progress file {os.environ.get('SCHED_PROGRESS_FILE')}", flush=True)
print(f"checkpoint dir {os.environ['SCHED_CHECKPOINT_DIR']}", flush=True)
for i in range(1, points + 1):
    progress.report(samples=i * 64, total=points * 64)
    if i == 2:
        with open(os.environ["SCHED_PROGRESS_FILE"], "a") as fh:
            fh.write("this is not a progress line\n")
            fh.write('{"samples": 99')  # the rest never comes: swallowed by the next line
            fh.flush()
            time.sleep(step_s)
            fh.write("\n")
    time.sleep(step_s)
print("done", flush=True)

"""A stand-in for the node agent in replay integration tests.

Records what it was started with (``agent-info.json``: pid, cwd, GA_*/SCHED_*/TEST_*
environment), appends its pid to ``starts.log``, writes ``sigterm`` when it gets SIGTERM and
exits, and otherwise sleeps until killed. ``TEST_EXIT_NOW=1`` (through agent_env) makes it exit at once.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

work = Path.cwd()
with (work / "starts.log").open("a") as log:
    log.write(f"{os.getpid()}\n")
info = {"pid": os.getpid(), "cwd": str(work),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("GA_", "SCHED_", "TEST_"))}}
tmp = work / "agent-info.json.tmp"
tmp.write_text(json.dumps(info))
os.replace(tmp, work / "agent-info.json")


def _on_term(*_: object) -> None:
    (work / "sigterm").write_text("1")
    sys.exit(0)


signal.signal(signal.SIGTERM, _on_term)
if os.environ.get("TEST_EXIT_NOW") == "1":
    sys.exit(0)
while True:
    time.sleep(0.1)

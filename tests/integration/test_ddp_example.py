"""The ddp example job alone (no scheduler): two real processes rendezvous on 127.0.0.1 with
the rank environment a gang's agents give, train with gloo, and resume exactly after a stop on
one node.

Each rank has its own checkpoint folder, as each node has; a restart copies rank 0's
``state.pt`` to every rank, as the agents restore the committed checkpoint on every node.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.redis_server import free_port

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ddp" / "train.py"
STEPS, EVERY = 400, 100
# The step sleep stretches the run to a few seconds so a signal lands mid-run.
SHORT_ENV = {"DDP_STEPS": str(STEPS), "DDP_CHECKPOINT_EVERY": str(EVERY), "DDP_SEED": "7",
             "DDP_STEP_SLEEP_S": "0.01", "DDP_PROGRESS_INTERVAL_S": "0.2"}
# Generous: a loaded 2-core machine runs the 2,500-step e2e reference in ~30 s idle.
TIMEOUT_S = 600


class Pair:
    """``nnodes`` ranks of the script, each with its own checkpoint folder ``work/rank<r>``
    and log ``work/rank<r>.log``."""

    def __init__(self, work: Path, job_env: dict[str, str], nnodes: int = 2):
        self.work, self.nnodes = work, nnodes
        port = free_port()
        self.procs = []
        for rank in range(nnodes):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_", "SCHED_"))}
            env.update(job_env)
            env.update({"NODE_RANK": str(rank), "NNODES": str(nnodes),
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                        "SCHED_CHECKPOINT_DIR": str(self.ckpt(rank))})
            with open(self.log_path(rank), "ab") as log:
                self.procs.append(subprocess.Popen([sys.executable, str(SCRIPT)], cwd=work,
                                                   env=env, stdout=log,
                                                   stderr=subprocess.STDOUT))

    def ckpt(self, rank: int) -> Path:
        return self.work / f"rank{rank}"

    def log_path(self, rank: int) -> Path:
        return self.work / f"rank{rank}.log"

    def log(self, rank: int) -> str:
        return self.log_path(rank).read_text(errors="replace")

    def wait(self, rank: int | None = None) -> list[int]:
        procs = self.procs if rank is None else [self.procs[rank]]
        try:
            return [p.wait(TIMEOUT_S) for p in procs]
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{exc}; the ranks' logs:\n{self.logs()}") from None
        finally:
            self.kill()

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def wait_for_line(self, rank: int, predicate, what: str) -> str:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for line in self.log(rank).splitlines():
                if predicate(line):
                    return line
            assert self.procs[rank].poll() is None, self.logs()
            time.sleep(0.05)
        raise AssertionError(f"no {what} in rank {rank}'s log:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- rank {r}\n{self.log(r)}" for r in range(self.nnodes))


def progress_past(step: int):
    def check(line: str) -> bool:
        return line.startswith("progress step=") and int(line.split()[1][5:]) > step
    return check


def run_uninterrupted(work: Path, job_env: dict[str, str], nnodes: int = 2) -> Path:
    """One whole run of ``nnodes`` ranks; the final model's path (rank 0's folder)."""
    work.mkdir(parents=True, exist_ok=True)
    pair = Pair(work, job_env, nnodes)
    assert pair.wait() == [0] * nnodes, pair.logs()
    return pair.ckpt(0) / "final_model.pt"


def load_model(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_same_model(got: Path, want: Path) -> None:
    a, b = load_model(got), load_model(want)
    assert a["step"] == b["step"]
    assert a["model"].keys() == b["model"].keys()
    for key in b["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), f"{key} differs"


def restore_everywhere(pair: Pair) -> None:
    """What the agents do before a restart: every node gets rank 0's checkpoint."""
    for rank in range(1, pair.nnodes):
        pair.ckpt(rank).mkdir(exist_ok=True)
        shutil.copy2(pair.ckpt(0) / "state.pt", pair.ckpt(rank) / "state.pt")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    return run_uninterrupted(tmp_path_factory.mktemp("ddp-reference"), SHORT_ENV)


def test_two_ranks_learn_the_same_model(reference):
    work = reference.parent.parent
    logs = [(work / f"rank{r}.log").read_text() for r in (0, 1)]
    done = [next(line for line in log.splitlines() if line.startswith("done ")) for log in logs]
    # Gradients are averaged: both ranks end with the same parameters.
    assert done[0].split("sha256=")[1] == done[1].split("sha256=")[1]
    assert not (work / "rank1" / "final_model.pt").exists()  # only rank 0 writes
    # Real learning: the final model fits fresh examples far better than the initial one.
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import train  # the example script as a module (its main only runs as a script)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    a, b = train.teacher(7)
    x, y = train.batch(7, 10**6, 0, a, b)
    initial = train.make_model(7)
    final = train.make_model(7)
    final.load_state_dict(load_model(reference)["model"])
    with torch.no_grad():
        before = torch.nn.functional.mse_loss(initial(x), y).item()
        after = torch.nn.functional.mse_loss(final(x), y).item()
    assert after < before / 2, (before, after)


def test_a_stop_on_one_node_stops_every_rank_at_one_step_and_resumes_exactly(tmp_path,
                                                                             reference):
    pair = Pair(tmp_path, SHORT_ENV)
    pair.wait_for_line(1, progress_past(EVERY), "progress past the first checkpoint")
    pair.procs[1].send_signal(signal.SIGTERM)  # the preempted node
    assert pair.procs[1].wait(TIMEOUT_S) == 143, pair.logs()
    stopped = pair.wait_for_line(0, lambda line: "waiting up to" in line, "wait for a signal")
    assert pair.procs[0].poll() is None  # rank 0 saved and waits for its own stop
    pair.procs[0].send_signal(signal.SIGTERM)  # its agent is told to stop the gang
    assert pair.wait() == [143, 143], pair.logs()
    step = int(stopped.split("stopped at step ")[1].split()[0])
    assert EVERY < step < STEPS
    assert f"stopped at step {step} after SIGTERM" in pair.log(1)
    assert f"checkpoint saved at step {step} after a stop request" in pair.log(0)
    assert not (pair.ckpt(0) / "final_model.pt").exists()

    restore_everywhere(pair)
    resumed = Pair(tmp_path, {**SHORT_ENV, "SCHED_RESUME": "1"})
    assert resumed.wait() == [0, 0], resumed.logs()
    assert f"resumed from step {step}" in resumed.log(1)
    assert_same_model(pair.ckpt(0) / "final_model.pt", reference)


def test_ranks_that_restored_different_steps_refuse_to_train(tmp_path):
    pair = Pair(tmp_path, SHORT_ENV)
    pair.wait_for_line(0, lambda line: line == f"checkpoint saved at step {EVERY}", "a save")
    pair.procs[0].send_signal(signal.SIGTERM)
    pair.procs[1].send_signal(signal.SIGTERM)
    assert pair.wait() == [143, 143], pair.logs()
    # Rank 1's folder holds no checkpoint: it would start at step 0 while rank 0 resumes.
    again = Pair(tmp_path, SHORT_ENV)
    assert again.wait() == [3, 3], again.logs()
    assert "the ranks restored different steps" in again.log(1)


def test_a_lost_peer_leaves_rank_0_with_the_last_completed_step(tmp_path, reference):
    pair = Pair(tmp_path, {**SHORT_ENV, "DDP_STOP_WAIT_S": "1"})
    pair.wait_for_line(1, progress_past(EVERY), "progress past the first checkpoint")
    pair.procs[1].kill()  # the node vanished without a notice
    assert pair.wait(0) == [5], pair.logs()
    saved = pair.wait_for_line(0, lambda line: line.endswith("after losing a peer"), "a save")
    step = int(saved.split("step ")[1].split()[0])
    assert EVERY < step < STEPS

    restore_everywhere(pair)
    resumed = Pair(tmp_path, {**SHORT_ENV, "SCHED_RESUME": "1"})
    assert resumed.wait() == [0, 0], resumed.logs()
    assert_same_model(pair.ckpt(0) / "final_model.pt", reference)

#!/usr/bin/env python3
"""ddp: a small data-parallel training job on CPU nodes with ``torch.distributed`` (gloo).

The example gang job (``../ddp-job.yaml``, ``resources.nodes: 2``): one process per node, each
rank trains the same MLP on its own synthetic batches, and DistributedDataParallel averages the
gradients across ranks every step. It checkpoints and resumes *exactly*: a run stopped on any
node (SIGTERM) and resumed ends with bit-identical parameters to an uninterrupted run with the
same seed and the same number of nodes.

The task: regress ``y = sin(x @ a) @ b`` (a fixed random "teacher", from the seed) with a
16 → 64 → 64 → 1 tanh MLP, MSE loss, Adam, float32, one thread per process. The batch of rank
``r`` at step ``s`` is drawn from a generator seeded with ``(seed, s, r)``, so it depends on
nothing else: a resumed run sees exactly the batches the uninterrupted one saw.

Configuration (environment variables)::

    DDP_STEPS                 training steps in total (default 2000)
    DDP_SEED                  seed of the model, the teacher and the batches (default 0)
    DDP_CHECKPOINT_EVERY      rank 0 saves every K steps (default 200)
    DDP_STEP_SLEEP_S          sleep after each step, seconds (default 0; slows the job down for
                              demos and tests, no effect on the results)
    DDP_PROGRESS_INTERVAL_S   seconds between progress lines (default 1.5; 0 = every step)
    DDP_STOP_WAIT_S           after stopping with the gang at a peer's request, how long a rank
                              that got no stop signal of its own waits for one (default 300)
    DDP_TIMEOUT_S             rendezvous and collective timeout, seconds (default 120)
    DDP_OUT                   final model path (default $SCHED_CHECKPOINT_DIR/final_model.pt)

Rank environment (torchrun-compatible, set by the node agent of a gang)::

    NODE_RANK (default 0), NNODES (default 1): this process's rank and the world size
    MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default 29500): rank 0's rendezvous

Environment set by the scheduler (as for the charlm example)::

    SCHED_CHECKPOINT_DIR   where ``state.pt`` lives (default ./checkpoints). Every rank reads
                           its own copy on start (the agent restores the committed checkpoint
                           on every node); only rank 0 writes.
    SCHED_RESUME=1         a checkpoint was restored. The script resumes whenever ``state.pt``
                           exists; with SCHED_RESUME=1 and none it says so and starts at 0.
    SCHED_PROGRESS_FILE    progress points appended as JSON lines
                           ``{"samples": step × batch × nnodes, "total": ..., "t": unix s}``
    SCHED_REPLAY_SPEED     speed of the replayed machine relative to this one (default 1);
                           below 1 each step is followed by pauses so that it takes
                           compute time ÷ speed

Checkpoints: ``state.pt`` (``torch.save`` of the model's and Adam's state dicts, the step and
the run configuration), written by rank 0 to ``state.pt.<pid>.tmp``, fsync'ed and renamed over
``state.pt`` (a reader sees the old or the new file, never half of one). Written every
``DDP_CHECKPOINT_EVERY`` steps, at the end, and when the gang stops. On start the ranks check
that they all restored the same step (else exit 3: a rank would train from another state) and
that the checkpoint was made with the same seed, model and number of nodes (else exit 3).

Stopping: SIGTERM (also SIGINT, SIGHUP, SIGUSR1, SIGUSR2) only sets a flag. Before every step
the ranks all-reduce their flags (MAX), so when any node is told to stop, every rank stops
after the same step; rank 0 saves ``state.pt``. A rank that received a signal then exits
128 + signal number (143 for SIGTERM), as the charlm example does (0 means finished). A rank
that stopped only because a peer was told to waits up to ``DDP_STOP_WAIT_S`` for its own
signal (its agent is told to stop the whole gang) and then exits the same way, so its agent
sees a stopped job rather than one that ended by itself; with no signal in that time it exits
4. If a peer vanishes (a collective fails), rank 0 saves the state of the last completed step
(a failed step changed nothing) and every rank waits for its stop signal the same way (exit 5
without one).

Output (stdout, flushed)::

    progress step=<n> total=<N> loss=<rank's loss:.6f>
    checkpoint saved at step <n> [after SIGTERM]
    resumed from step <n> (<path>)
    done step=<N> loss=<.6f> sha256=<hex>     sha256 of the final parameters (float32
                                              little-endian, state-dict order)

Exit codes: 0 done; 3 unusable checkpoint or ranks out of step; 4 stopped by a peer without a
signal of its own; 5 a peer was lost and no stop signal came; 128+signum after a stop signal.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

FORMAT_VERSION = 1
STATE_NAME = "state.pt"
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")
EXIT_BAD_STATE, EXIT_NO_SIGNAL, EXIT_PEER_LOST = 3, 4, 5
HPARAMS = {"inputs": 16, "hidden": 64, "batch": 32, "lr": 1e-3, "teacher_hidden": 8}


def log(message: str) -> None:
    print(message, flush=True)


def env_number(name: str, default: float, minimum: float, kind=int):
    """``kind(os.environ[name])``, or ``default`` when unset; exits 2 on a bad value."""
    raw = os.environ.get(name, "")
    if raw == "":
        return kind(default)
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < minimum:
        print(f"train.py: error: {name}={raw!r} must be a number >= {minimum}", file=sys.stderr)
        sys.exit(2)
    return value


class StopFlag:
    """The first stop signal received (``signum``), set from the signal handler."""

    def __init__(self):
        self.signum: int | None = None
        for name in STOP_SIGNALS:
            signal.signal(getattr(signal, name), self)

    def __call__(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum

    def wait(self, timeout_s: float) -> int | None:
        """Waits up to ``timeout_s`` seconds for a signal; returns its number or None."""
        deadline = time.monotonic() + timeout_s
        while self.signum is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.signum


class Pacer:
    """Stretches each step's wall time to compute time ÷ ``speed`` (speed < 1), paying the
    owed time in pauses of at most 0.1 s so a stop signal is still seen at once."""

    def __init__(self, speed: float):
        self.stretch = max(0.0, 1.0 / speed - 1.0)
        self.owed = 0.0

    def after_step(self, compute_s: float, stop: StopFlag) -> None:
        self.owed += compute_s * self.stretch
        while self.owed >= 0.005 and stop.signum is None:
            started = time.perf_counter()
            time.sleep(min(self.owed, 0.1))
            self.owed -= time.perf_counter() - started


def replay_speed() -> float:
    raw = os.environ.get("SCHED_REPLAY_SPEED") or "1"
    try:
        speed = float(raw)
    except ValueError:
        speed = float("nan")
    if not math.isfinite(speed) or speed <= 0:
        log(f"SCHED_REPLAY_SPEED={raw!r} is not a number > 0; running at speed 1")
        return 1.0
    return speed


def report_progress(step: int, total: int, per_step: int) -> None:
    """One JSON line appended to $SCHED_PROGRESS_FILE (one write, O_APPEND); never raises."""
    path = os.environ.get("SCHED_PROGRESS_FILE")
    if not path:
        return
    line = json.dumps({"samples": step * per_step, "total": total * per_step,
                       "t": round(time.time(), 3)}) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


# ----------------------------------------------------------------------------- model and data


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    h = HPARAMS["hidden"]
    return torch.nn.Sequential(torch.nn.Linear(HPARAMS["inputs"], h), torch.nn.Tanh(),
                               torch.nn.Linear(h, h), torch.nn.Tanh(), torch.nn.Linear(h, 1))


def generator(*key: int) -> torch.Generator:
    """A generator whose stream depends only on ``key`` (e.g. seed, step, rank)."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1)[0]))


def teacher(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = generator(seed, 2**31 - 1)
    a = torch.randn(HPARAMS["inputs"], HPARAMS["teacher_hidden"], generator=g)
    b = torch.randn(HPARAMS["teacher_hidden"], 1, generator=g) / HPARAMS["teacher_hidden"] ** 0.5
    return a, b


def batch(seed: int, step: int, rank: int, a: torch.Tensor, b: torch.Tensor):
    """Rank ``rank``'s examples for ``step``: x (batch, inputs), y (batch, 1)."""
    x = torch.randn(HPARAMS["batch"], HPARAMS["inputs"], generator=generator(seed, step, rank))
    return x, torch.sin(x @ a / HPARAMS["inputs"] ** 0.5) @ b


def params_sha256(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().contiguous().numpy().astype("<f4").tobytes())
    return digest.hexdigest()


# ----------------------------------------------------------------------------- checkpoints


def atomic_save(obj, path: Path) -> None:
    """torch.save to ``<path>.<pid>.tmp`` in the same folder, fsync, rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run_config(seed: int, nnodes: int) -> dict:
    return {"format": FORMAT_VERSION, "seed": seed, "nnodes": nnodes, "hparams": HPARAMS}


class BadState(Exception):
    pass


def load_state(path: Path, config: dict, model, optimizer) -> int:
    """Loads ``path`` into ``model`` and ``optimizer``; returns its step. Raises BadState."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        saved = state["config"]
        if saved != config:
            raise BadState(f"checkpoint {path} was made by another run ({saved} != {config})")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return int(state["step"])
    except BadState:
        raise
    except Exception as exc:
        raise BadState(f"cannot read checkpoint {path}: {type(exc).__name__}: {exc}") from None


def save_state(path: Path, config: dict, model, optimizer, step: int) -> None:
    atomic_save({"config": config, "step": step, "model": model.state_dict(),
                 "optimizer": optimizer.state_dict()}, path)


# ----------------------------------------------------------------------------- training


class Run:
    """One rank's training run; :meth:`main` returns the exit code."""

    def __init__(self):
        self.rank = env_number("NODE_RANK", 0, 0)
        self.nnodes = env_number("NNODES", 1, 1)
        self.steps = env_number("DDP_STEPS", 2000, 1)
        self.seed = env_number("DDP_SEED", 0, 0)
        self.every = env_number("DDP_CHECKPOINT_EVERY", 200, 1)
        self.step_sleep_s = env_number("DDP_STEP_SLEEP_S", 0, 0, float)
        self.progress_s = env_number("DDP_PROGRESS_INTERVAL_S", 1.5, 0, float)
        self.stop_wait_s = env_number("DDP_STOP_WAIT_S", 300, 0, float)
        self.timeout_s = env_number("DDP_TIMEOUT_S", 120, 1, float)
        self.ckpt_dir = Path(os.environ.get("SCHED_CHECKPOINT_DIR") or "checkpoints")
        self.state_path = self.ckpt_dir / STATE_NAME
        self.out_path = Path(os.environ.get("DDP_OUT") or self.ckpt_dir / "final_model.pt")
        self.config = run_config(self.seed, self.nnodes)
        self.stop = StopFlag()

    def connect(self) -> None:
        addr = os.environ.get("MASTER_ADDR") or "127.0.0.1"
        port = env_number("MASTER_PORT", 29500, 1)
        dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=self.rank,
                                world_size=self.nnodes,
                                timeout=datetime.timedelta(seconds=self.timeout_s))

    def all_reduce_int(self, value: int, op) -> int:
        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, op=op)
        return int(tensor.item())

    def restore(self, model, optimizer) -> int:
        """The step every rank resumes from (0 without a checkpoint). Raises BadState."""
        step = 0
        if self.state_path.exists():
            step = load_state(self.state_path, self.config, model, optimizer)
            log(f"resumed from step {step} ({self.state_path})")
        elif os.environ.get("SCHED_RESUME") == "1":
            log(f"SCHED_RESUME=1 but no checkpoint at {self.state_path}; starting from step 0")
        low = self.all_reduce_int(step, dist.ReduceOp.MIN)
        high = self.all_reduce_int(step, dist.ReduceOp.MAX)
        if low != high:
            raise BadState(f"the ranks restored different steps ({low} to {high}); every "
                           f"node needs the same checkpoint")
        return step

    def save(self, model, optimizer, step: int, why: str = "") -> None:
        if self.rank == 0:
            save_state(self.state_path, self.config, model, optimizer, step)
            log(f"checkpoint saved at step {step}{why}")

    def stopped(self, step: int, peer_lost: bool) -> int:
        """Exit code after the gang stopped at ``step`` (rank 0 has saved)."""
        own = self.stop.signum is not None
        if not own:
            why = "a peer was lost" if peer_lost else "a peer was told to stop"
            log(f"stopped at step {step} ({why}); waiting up to {self.stop_wait_s:g} s for "
                f"this node's stop signal")
        signum = self.stop.wait(self.stop_wait_s)
        if signum is None:
            log("no stop signal came; exiting")
            return EXIT_PEER_LOST if peer_lost else EXIT_NO_SIGNAL
        if own:
            log(f"stopped at step {step} after {signal.Signals(signum).name}")
        return 128 + signum

    def main(self) -> int:
        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
        torch.use_deterministic_algorithms(True)
        for stale in self.ckpt_dir.glob(f"{STATE_NAME}.*.tmp") if self.ckpt_dir.is_dir() else ():
            stale.unlink(missing_ok=True)
        self.connect()
        model = make_model(self.seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=HPARAMS["lr"])
        try:
            step = self.restore(model, optimizer)
        except BadState as exc:
            print(f"train.py: error: {exc}", file=sys.stderr, flush=True)
            return EXIT_BAD_STATE
        ddp = DistributedDataParallel(model)
        a, b = teacher(self.seed)
        per_step = HPARAMS["batch"] * self.nnodes
        log(f"ddp: rank {self.rank} of {self.nnodes}, steps {step}->{self.steps}, seed "
            f"{self.seed}, checkpoint dir {self.ckpt_dir}")
        pacer = Pacer(replay_speed())
        report_progress(step, self.steps, per_step)
        last_progress, loss = time.monotonic(), float("nan")
        while step < self.steps:
            try:
                if self.all_reduce_int(int(self.stop.signum is not None), dist.ReduceOp.MAX):
                    self.save(model, optimizer, step, " after a stop request")
                    return self.stopped(step, peer_lost=False)
                started = time.perf_counter()
                x, y = batch(self.seed, step, self.rank, a, b)
                optimizer.zero_grad(set_to_none=True)
                batch_loss = torch.nn.functional.mse_loss(ddp(x), y)
                batch_loss.backward()
            except RuntimeError as exc:  # gloo raises a plain RuntimeError on a reset peer
                # The step failed before the optimizer ran: the state is that of ``step``.
                log(f"a collective failed at step {step}: {type(exc).__name__}: {exc}")
                self.save(model, optimizer, step, " after losing a peer")
                return self.stopped(step, peer_lost=True)
            optimizer.step()
            step, loss = step + 1, batch_loss.item()
            pacer.after_step(time.perf_counter() - started, self.stop)
            if step % self.every == 0 and step < self.steps:
                self.save(model, optimizer, step)
            if time.monotonic() - last_progress >= self.progress_s or step == self.steps:
                log(f"progress step={step} total={self.steps} loss={loss:.6f}")
                report_progress(step, self.steps, per_step)
                last_progress = time.monotonic()
            if self.step_sleep_s:
                time.sleep(self.step_sleep_s)
        self.save(model, optimizer, step)
        if self.rank == 0:
            atomic_save({"config": self.config, "step": step, "model": model.state_dict()},
                        self.out_path)
            log(f"final model {self.out_path}")
        log(f"done step={step} loss={loss:.6f} sha256={params_sha256(model)}")
        dist.destroy_process_group()
        return 0


if __name__ == "__main__":
    code = Run().main()
    sys.stdout.flush()
    sys.stderr.flush()
    # A process group left open (a refused restore, a lost peer) still owns gloo's threads; the
    # interpreter's normal exit destroys them joinable and the C++ runtime aborts (SIGABRT), which
    # would hide the exit code the agent reads. Nothing is left to flush or close here.
    os._exit(code)

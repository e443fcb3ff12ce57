#!/usr/bin/env python3
"""charlm: a small character-level language model trained on the CPU with numpy.

This is the example job that ``schedctl demo`` and the end-to-end tests run. It learns to
predict the next character of ``corpus.txt`` from the previous ``CONTEXT`` characters with a
context-window MLP (embeddings -> tanh hidden layer -> softmax over the vocabulary), trained with
AdamW in float64. It checkpoints and resumes *exactly*: a run that is stopped (SIGTERM) or
killed (SIGKILL) and resumed ends with bit-identical parameters to an uninterrupted run with the
same seed.

Configuration (CLI flag, else environment variable, else default)::

    --steps N              CHARLM_STEPS               training steps in total (default 45000)
    --seed S               CHARLM_SEED                seed for init and batch sampling (default 0)
    --checkpoint-every K   CHARLM_CHECKPOINT_EVERY    periodic checkpoint every K steps (default 2500)
    --out PATH             CHARLM_OUT                 final model (default $SCHED_CHECKPOINT_DIR/final_model.npz)
    --progress-interval T  CHARLM_PROGRESS_INTERVAL_S seconds between progress lines (default 1.5; 0 = every step)
    --step-sleep T         CHARLM_STEP_SLEEP_S        sleep T seconds after each step (default 0; slows
                                                      the job down for demos and tests, no effect on results)
    --corpus PATH          CHARLM_CORPUS              training text (default corpus.txt beside this file)

Environment set by the scheduler:

    SCHED_CHECKPOINT_DIR   where ``state.npz`` lives (default ./checkpoints)
    SCHED_PROGRESS_FILE    where to append progress points (the format of
                           ``scheduler.progress``, written here without importing the package):
                           ``{"samples": step × batch, "total": steps × batch, "t": unix s}``
                           at the start, with every ``progress`` line and at the end
    SCHED_REPLAY_SPEED     how fast the (replayed) machine is, relative to the one running the
                           script (default 1). Below 1 each step is followed by a pause so that
                           its wall time is its compute time ÷ the speed (paid in pauses of at
                           most 0.1 s, so a stop signal is still seen at once); the computation
                           and its results are the same. Above 1 the script cannot go faster
                           than the machine and says so; an invalid value is ignored (speed 1).
    SCHED_RESUME=1         the scheduler restored a checkpoint; resume from it. The script also
                           resumes whenever ``state.npz`` exists, even without SCHED_RESUME, so a
                           plain restart in the same directory continues the run (delete the
                           checkpoint dir to start over). With SCHED_RESUME=1 and no state.npz
                           it says so and starts from step 0.

Checkpoints: ``state.npz`` holds the parameters, both Adam moments, the step, the RNG's
``bit_generator.state`` (as JSON), the per-step loss history and the run's configuration. It is
written to ``state.npz.<pid>.tmp`` in the same directory, fsync'ed, then ``os.replace``'d over
``state.npz`` (atomic: a reader sees the old or the new file, never half of one; readers/syncers
should skip ``*.tmp``). It is written every ``--checkpoint-every`` steps, at the end of the run,
and on a stop signal. A checkpoint whose configuration (seed, model shape, corpus) differs from
this run's is refused (exit 3) rather than silently mixed.

Signals: SIGTERM (also SIGINT, SIGHUP, SIGUSR1, SIGUSR2 — any of the signals a job spec may
name) sets a flag; at the next step boundary the script saves ``state.npz``, prints
``checkpoint saved at step N after SIGTERM`` and exits with 128 + signal number (143 for
SIGTERM). It deliberately does not exit 0: exit 0 means "training finished, final model
written", and a stopped run has not finished. If the signal arrives during the last step the run
simply completes and exits 0.

Output (stdout, line-buffered/flushed), machine-readable lines::

    progress step=<n> total=<N> loss=<loss:.4f>     about every --progress-interval seconds and
                                                    at the last step; loss = mean training loss
                                                    of the last (up to) 50 steps
    checkpoint saved at step <n>                    after each periodic/final checkpoint
    checkpoint saved at step <n> after SIGTERM      (or SIGINT, ...) before exiting 128+signum
    resumed from step <n> (<path>)
    done step=<N> loss=<loss:.4f> sha256=<hex>      at the end; sha256 of the final parameters
                                                    (float64 little-endian, C order, in the
                                                    order embed, w1, b1, w2, b2)

Exit codes: 0 done; 2 bad arguments; 3 unusable checkpoint or corpus; 128+signum after a stop
signal.
"""

from __future__ import annotations

import os

# Single-threaded BLAS before numpy is imported: a multi-threaded BLAS may split sums
# differently from run to run, and exact resume needs the same float results every time.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

FORMAT_VERSION = 1
DEFAULT_STEPS = 45000
DEFAULT_CHECKPOINT_EVERY = 2500
DEFAULT_PROGRESS_INTERVAL_S = 1.5
STATE_NAME = "state.npz"
LOSS_WINDOW = 50

# Model and optimizer hyperparameters (recorded in every checkpoint and checked on resume).
HPARAMS = {
    "context": 10,       # characters of context
    "embed": 16,         # embedding size per character
    "hidden": 160,       # tanh hidden units
    "batch": 64,         # examples per step
    "lr": 2e-3,          # Adam learning rate (constant)
    "beta1": 0.9,
    "beta2": 0.999,
    "eps": 1e-8,
    "weight_decay": 0.15,  # decoupled (AdamW) decay of embed, w1, w2; keeps it from memorizing
    "val_every": 10,     # every 10th block of 1000 characters is held out for validation
}
PARAM_NAMES = ("embed", "w1", "b1", "w2", "b2")
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")
SAMPLE_PROMPT = "Shall I compare "


def log(message: str) -> None:
    print(message, flush=True)


def report_progress(step: int, total: int) -> None:
    """Append one point to $SCHED_PROGRESS_FILE (a no-op without it); one write per line, with
    O_APPEND, so the agent never reads half of one. A failure never stops training."""
    path = os.environ.get("SCHED_PROGRESS_FILE")
    if not path:
        return
    batch = HPARAMS["batch"]
    line = json.dumps({"samples": step * batch, "total": total * batch,
                       "t": round(time.time(), 3)}) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def replay_speed() -> float:
    """$SCHED_REPLAY_SPEED as a finite number > 0 (default and fallback 1.0)."""
    raw = os.environ.get("SCHED_REPLAY_SPEED")
    if not raw:
        return 1.0
    try:
        speed = float(raw)
    except ValueError:
        speed = float("nan")
    if not np.isfinite(speed) or speed <= 0:
        log(f"SCHED_REPLAY_SPEED={raw!r} is not a number > 0; running at speed 1")
        return 1.0
    return speed


class Pacer:
    """Stretches wall time to imitate a machine ``speed`` times as fast as this one (< 1:
    slower): each step's compute time ``c`` is followed by pauses adding up to
    ``c × (1/speed − 1)``, owed across steps and paid in pauses of at most ``MAX_PAUSE_S``."""

    MAX_PAUSE_S = 0.1
    MIN_PAUSE_S = 0.005  # a debt smaller than this waits for the next step

    def __init__(self, speed: float):
        self.stretch = max(0.0, 1.0 / speed - 1.0)
        self.owed = 0.0

    def after_step(self, compute_s: float, stop: StopFlag) -> None:
        if not self.stretch:
            return
        self.owed += compute_s * self.stretch
        while self.owed >= self.MIN_PAUSE_S and stop.signum is None:
            pause = min(self.owed, self.MAX_PAUSE_S)
            start = time.perf_counter()
            time.sleep(pause)
            self.owed -= time.perf_counter() - start


# ----------------------------------------------------------------------------- arguments


class UsageError(Exception):
    pass


def _env_default(name: str, fallback: str | None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else fallback


def _int_at_least(minimum: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be >= {minimum}, got {value}")
        return value
    return parse


def _float_at_least(minimum: float, what: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
        if not np.isfinite(value) or value < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be a finite number >= {minimum}, got {text}")
        return value
    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="train.py",
        description="Train a small character-level language model (numpy, CPU) with exact "
                    "checkpoint/resume. Flags fall back to the CHARLM_* environment variables.",
    )
    specs = [
        ("--steps", "CHARLM_STEPS", str(DEFAULT_STEPS), _int_at_least(1, "--steps"),
         "training steps in total"),
        ("--seed", "CHARLM_SEED", "0", _int_at_least(0, "--seed"),
         "seed for initialization and batch sampling"),
        ("--checkpoint-every", "CHARLM_CHECKPOINT_EVERY", str(DEFAULT_CHECKPOINT_EVERY),
         _int_at_least(1, "--checkpoint-every"), "save state.npz every K steps"),
        ("--out", "CHARLM_OUT", None, str,
         "final model path (default $SCHED_CHECKPOINT_DIR/final_model.npz)"),
        ("--progress-interval", "CHARLM_PROGRESS_INTERVAL_S", str(DEFAULT_PROGRESS_INTERVAL_S),
         _float_at_least(0.0, "--progress-interval"), "seconds between progress lines (0: every step)"),
        ("--step-sleep", "CHARLM_STEP_SLEEP_S", "0", _float_at_least(0.0, "--step-sleep"),
         "sleep this many seconds after each step (slows demos/tests; results unchanged)"),
        ("--corpus", "CHARLM_CORPUS", str(Path(__file__).resolve().with_name("corpus.txt")), str,
         "training text"),
    ]
    env_values = {}
    for flag, env, default, conv, help_text in specs:
        dest = flag[2:].replace("-", "_")
        parser.add_argument(flag, dest=dest, type=conv, default=None,
                            help=f"{help_text} [env {env}; default {default}]")
        env_values[dest] = (env, _env_default(env, default), conv)
    args = parser.parse_args(argv)
    # Environment fallbacks go through the same validation as the flags.
    for dest, (env, raw, conv) in env_values.items():
        if getattr(args, dest) is None and raw is not None:
            try:
                setattr(args, dest, conv(raw))
            except argparse.ArgumentTypeError as exc:
                parser.error(f"{env}: {exc}")
    return args


# ----------------------------------------------------------------------------- data


def load_corpus(path: str) -> tuple[str, bytes]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read corpus {path}: {exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"corpus {path} is not UTF-8: {exc}") from None
    if len(text) < 2 * HPARAMS["context"] + 100:
        raise UsageError(f"corpus {path} is too short ({len(text)} characters)")
    return text, raw


class Data:
    """Character ids and the train/validation target positions."""

    def __init__(self, text: str):
        self.vocab = "".join(sorted(set(text)))
        index = {ch: i for i, ch in enumerate(self.vocab)}
        self.ids = np.array([index[ch] for ch in text], dtype=np.int64)
        c = HPARAMS["context"]
        positions = np.arange(c, len(text), dtype=np.int64)  # targets with a full context
        held_out = (positions // 1000) % HPARAMS["val_every"] == HPARAMS["val_every"] - 1
        self.train_pos = positions[~held_out]
        self.val_pos = positions[held_out]
        self.offsets = np.arange(-c, 0, dtype=np.int64)

    def batch(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.ids[positions[:, None] + self.offsets], self.ids[positions]


# ----------------------------------------------------------------------------- model


def init_params(rng: np.random.Generator, vocab_size: int) -> dict[str, np.ndarray]:
    c, e, h = HPARAMS["context"], HPARAMS["embed"], HPARAMS["hidden"]
    return {
        "embed": rng.standard_normal((vocab_size, e)),
        "w1": rng.standard_normal((c * e, h)) * (5.0 / 3.0) / np.sqrt(c * e),
        "b1": np.zeros(h),
        "w2": rng.standard_normal((h, vocab_size)) * 0.01,
        "b2": np.zeros(vocab_size),
    }


def forward(params: dict[str, np.ndarray], x: np.ndarray):
    emb = params["embed"][x]                                   # (B, C, E)
    flat = emb.reshape(x.shape[0], -1)                          # (B, C*E)
    hidden = np.tanh(flat @ params["w1"] + params["b1"])        # (B, H)
    logits = hidden @ params["w2"] + params["b2"]               # (B, V)
    logits = logits - logits.max(axis=1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return flat, hidden, log_probs


def loss_and_grads(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    batch = x.shape[0]
    flat, hidden, log_probs = forward(params, x)
    loss = -log_probs[np.arange(batch), y].mean()
    dlogits = np.exp(log_probs)
    dlogits[np.arange(batch), y] -= 1.0
    dlogits /= batch
    grads = {"w2": hidden.T @ dlogits, "b2": dlogits.sum(axis=0)}
    dpre = (dlogits @ params["w2"].T) * (1.0 - hidden * hidden)
    grads["w1"] = flat.T @ dpre
    grads["b1"] = dpre.sum(axis=0)
    dflat = dpre @ params["w1"].T
    dembed = np.zeros_like(params["embed"])
    np.add.at(dembed, x.reshape(-1), dflat.reshape(x.size, -1))
    grads["embed"] = dembed
    return float(loss), grads


DECAYED = ("embed", "w1", "w2")


def adam_update(params, grads, m, v, t: int) -> None:
    """One AdamW step (t counts from 1), in place."""
    lr, b1, b2, eps = HPARAMS["lr"], HPARAMS["beta1"], HPARAMS["beta2"], HPARAMS["eps"]
    decay = 1.0 - lr * HPARAMS["weight_decay"]
    corr1 = 1.0 - b1 ** t
    corr2 = 1.0 - b2 ** t
    for name in PARAM_NAMES:
        g = grads[name]
        if name in DECAYED:
            params[name] *= decay
        m[name] *= b1
        m[name] += (1.0 - b1) * g
        v[name] *= b2
        v[name] += (1.0 - b2) * (g * g)
        params[name] -= lr * (m[name] / corr1) / (np.sqrt(v[name] / corr2) + eps)


def params_sha256(params: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in PARAM_NAMES:
        digest.update(np.ascontiguousarray(params[name], dtype="<f8").tobytes())
    return digest.hexdigest()


def evaluate(params, data: Data, chunk: int = 2048) -> float:
    total = 0.0
    for start in range(0, len(data.val_pos), chunk):
        x, y = data.batch(data.val_pos[start:start + chunk])
        _, _, log_probs = forward(params, x)
        total += -log_probs[np.arange(len(y)), y].sum()
    return total / max(1, len(data.val_pos))


def generate(params, vocab: str, seed: int, length: int = 240, temperature: float = 0.8) -> str:
    """Sample text (own RNG: does not touch the training state)."""
    rng = np.random.default_rng([seed, 1])
    index = {ch: i for i, ch in enumerate(vocab)}
    c = HPARAMS["context"]
    prompt = [index.get(ch, 0) for ch in SAMPLE_PROMPT][-c:]
    context = [index.get(" ", 0)] * (c - len(prompt)) + prompt
    out = []
    for _ in range(length):
        _, _, log_probs = forward(params, np.array([context], dtype=np.int64))
        p = np.exp(log_probs[0] / temperature)
        nxt = int(rng.choice(len(vocab), p=p / p.sum()))
        out.append(vocab[nxt])
        context = context[1:] + [nxt]
    return SAMPLE_PROMPT + "".join(out)


# ----------------------------------------------------------------------------- checkpoints


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """np.savez to ``<path>.<pid>.tmp`` in the same dir, fsync, os.replace over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:  # a file object: np.savez does not append ".npz"
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def remove_stale_tmp(directory: Path, names: list[str]) -> None:
    """Temp files left by a run that was killed mid-save (only ours: ``<name>.<pid>.tmp``)."""
    if not directory.is_dir():
        return
    for name in names:
        for stale in directory.glob(f"{name}.*.tmp"):
            try:
                stale.unlink()
            except OSError:
                pass


def run_config(seed: int, vocab: str, corpus_sha: str) -> dict:
    return {"format": FORMAT_VERSION, "seed": seed, "hparams": HPARAMS, "vocab": vocab,
            "corpus_sha256": corpus_sha, "params": list(PARAM_NAMES)}


class State:
    def __init__(self, params, m, v, step, rng, losses):
        self.params, self.m, self.v = params, m, v
        self.step = step
        self.rng = rng
        self.losses = losses  # list of float, one per completed step


def save_state(path: Path, state: State, config: dict) -> None:
    arrays = {
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "step": np.array(state.step, dtype=np.int64),
        "rng_state": np.array(json.dumps(state.rng.bit_generator.state)),
        "loss_history": np.array(state.losses, dtype=np.float64),
        "config": np.array(json.dumps(config, sort_keys=True)),
    }
    for name in PARAM_NAMES:
        arrays[f"param_{name}"] = state.params[name]
        arrays[f"adam_m_{name}"] = state.m[name]
        arrays[f"adam_v_{name}"] = state.v[name]
    atomic_savez(path, arrays)


def load_state(path: Path, config: dict) -> State:
    try:
        with np.load(path, allow_pickle=False) as npz:
            if int(npz["format_version"]) != FORMAT_VERSION:
                raise UsageError(f"checkpoint {path} has format {int(npz['format_version'])}, "
                                 f"expected {FORMAT_VERSION}")
            saved = json.loads(str(npz["config"]))
            if saved != json.loads(json.dumps(config, sort_keys=True)):
                diff = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
                raise UsageError(
                    f"checkpoint {path} was made by a different run (differs in: "
                    f"{', '.join(diff)}); delete it or use the same seed, model and corpus")
            params = {n: np.array(npz[f"param_{n}"], dtype=np.float64) for n in PARAM_NAMES}
            m = {n: np.array(npz[f"adam_m_{n}"], dtype=np.float64) for n in PARAM_NAMES}
            v = {n: np.array(npz[f"adam_v_{n}"], dtype=np.float64) for n in PARAM_NAMES}
            step = int(npz["step"])
            rng = np.random.default_rng()
            rng.bit_generator.state = json.loads(str(npz["rng_state"]))
            losses = [float(x) for x in npz["loss_history"]]
    except UsageError:
        raise
    except Exception as exc:  # zip/KeyError/ValueError: not a checkpoint we can use
        raise UsageError(f"cannot read checkpoint {path}: {type(exc).__name__}: {exc}") from None
    if len(losses) != step:
        raise UsageError(f"checkpoint {path} is inconsistent: step {step} but "
                         f"{len(losses)} losses recorded")
    return State(params, m, v, step, rng, losses)


# ----------------------------------------------------------------------------- training


class StopFlag:
    def __init__(self):
        self.signum: int | None = None

    def __call__(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum


def install_handlers(flag: StopFlag) -> None:
    for name in STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, flag)


def recent_loss(losses: list[float]) -> float:
    window = losses[-LOSS_WINDOW:]
    return float(np.mean(window)) if window else float("nan")


def train(args: argparse.Namespace) -> int:
    stop = StopFlag()
    install_handlers(stop)

    text, raw = load_corpus(args.corpus)
    data = Data(text)
    config = run_config(args.seed, data.vocab, hashlib.sha256(raw).hexdigest())

    ckpt_dir = Path(os.environ.get("SCHED_CHECKPOINT_DIR") or "checkpoints")
    state_path = ckpt_dir / STATE_NAME
    out_path = Path(args.out) if args.out else ckpt_dir / "final_model.npz"
    remove_stale_tmp(ckpt_dir, [STATE_NAME])
    remove_stale_tmp(out_path.parent, [out_path.name])

    if state_path.exists():
        state = load_state(state_path, config)
        log(f"resumed from step {state.step} ({state_path})")
    else:
        if os.environ.get("SCHED_RESUME") == "1":
            log(f"SCHED_RESUME=1 but no checkpoint at {state_path}; starting from step 0")
        rng = np.random.default_rng(args.seed)
        params = init_params(rng, len(data.vocab))
        state = State(params, {n: np.zeros_like(p) for n, p in params.items()},
                      {n: np.zeros_like(p) for n, p in params.items()}, 0, rng, [])

    total = args.steps
    n_params = sum(p.size for p in state.params.values())
    log(f"charlm: {len(text)} chars, vocab {len(data.vocab)}, {n_params} params, "
        f"steps {state.step}->{total}, seed {args.seed}, checkpoint dir {ckpt_dir}")
    if state.step > total:
        log(f"checkpoint is at step {state.step}, past --steps {total}; finishing there")

    speed = replay_speed()
    if speed != 1.0:
        log(f"replayed machine speed {speed:g}" + (
            " (faster than this machine: running at its own speed)" if speed > 1 else ""))
    pacer = Pacer(speed)
    report_progress(state.step, total)

    batch = HPARAMS["batch"]
    n_train = len(data.train_pos)
    last_saved = state.step
    last_progress = time.monotonic()
    while state.step < total:
        if stop.signum is not None:
            save_state(state_path, state, config)
            name = signal.Signals(stop.signum).name
            log(f"checkpoint saved at step {state.step} after {name}")
            return 128 + stop.signum
        started = time.perf_counter()
        pos = data.train_pos[state.rng.integers(0, n_train, size=batch)]
        x, y = data.batch(pos)
        loss, grads = loss_and_grads(state.params, x, y)
        adam_update(state.params, grads, state.m, state.v, state.step + 1)
        state.step += 1
        state.losses.append(loss)
        pacer.after_step(time.perf_counter() - started, stop)
        if state.step % args.checkpoint_every == 0 and state.step < total:
            save_state(state_path, state, config)
            last_saved = state.step
            log(f"checkpoint saved at step {state.step}")
        now = time.monotonic()
        if now - last_progress >= args.progress_interval or state.step == total:
            log(f"progress step={state.step} total={total} loss={recent_loss(state.losses):.4f}")
            report_progress(state.step, total)
            last_progress = now
        if args.step_sleep:
            time.sleep(args.step_sleep)

    # Finished: checkpoint the final state too (a restart after this point just re-finishes).
    if last_saved != state.step or not state_path.exists():
        save_state(state_path, state, config)
        log(f"checkpoint saved at step {state.step}")
    final = {name: state.params[name] for name in PARAM_NAMES}
    final["step"] = np.array(state.step, dtype=np.int64)
    final["vocab"] = np.array(data.vocab)
    final["context"] = np.array(HPARAMS["context"], dtype=np.int64)
    atomic_savez(out_path, final)
    log(f"validation loss={evaluate(state.params, data):.4f} "
        f"(uniform baseline {np.log(len(data.vocab)):.4f}); final model {out_path}")
    for line in generate(state.params, data.vocab, args.seed).splitlines():
        log(f"sample| {line}")
    log(f"done step={state.step} loss={recent_loss(state.losses):.4f} "
        f"sha256={params_sha256(state.params)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return train(args)
    except UsageError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr, flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(main())

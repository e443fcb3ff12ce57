"""Checkpoint commits to a real S3 server next to a raw boto3 upload of the same files.

A checkpoint of ``--files`` files of ``--mib`` MiB each (dense float32 weights ~ N(0, 0.02):
zstd saves < 10 %, so ``auto`` stores them raw after a sampled trial) is committed to a
SeaweedFS ``weed mini`` started for the run (``tests/fixtures/s3_server.py``). Each of
``--runs`` rounds, in this order, on fresh buckets:

- **raw full**: boto3's TransferManager (default TransferConfig: 10 parts of 8 MiB at once,
  what ``upload_file`` uses) uploads every file at once, the baseline;
- **commit full**: :func:`commit_checkpoint` of the folder (digest cache empty, as the first
  commit of an attempt);
- **staging copy**: the same commit through a store that cannot stream, so each new file is
  copied beside the folder and then uploaded (the way every commit went before);
- one file is rewritten; **raw one**: the raw upload of that file alone;
- **commit incremental**: the next commit (digest cache of the full commit);
- another file rewritten; **incremental, cache cold**: a commit with an empty digest cache
  (a restarted agent, or files written < 2 s before the previous commit): every file is
  hashed again, only the changed one uploaded.

Bytes sent are counted by a boto3 hook on the client (PutObject and UploadPart bodies).
Command: ``python -m benchmarks.checkpoints.wire [--files 8] [--mib 128] [--runs 5]``; the
result replaces the wire section of ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from s3transfer.manager import TransferConfig, TransferManager

from benchmarks.checkpoints.run import WIRE_MARKER
from scheduler.checkpoints import S3ObjectStore, commit_checkpoint
from scheduler.checkpoints.digests import DigestCache
from tests.fixtures.s3_server import start_s3

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).with_name("RESULTS.md")
MARKER = WIRE_MARKER
JOB = "wire"


class NoStreaming:
    """A store without ``put_stream``: commits upload a frozen copy of each new file."""

    def __init__(self, inner: S3ObjectStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        if name == "put_stream":
            raise AttributeError(name)
        return getattr(self._inner, name)


class SentBytes:
    """Counts the body bytes of PutObject / UploadPart requests a boto3 client sends."""

    def __init__(self, client) -> None:  # noqa: ANN001 - a boto3 S3 client
        self.total = 0
        for op in ("PutObject", "UploadPart"):
            client.meta.events.register(f"before-send.s3.{op}", self._count)

    def _count(self, request, **_) -> None:  # noqa: ANN001 - botocore's AWSPreparedRequest
        headers = request.headers
        size = headers.get("X-Amz-Decoded-Content-Length") or headers.get("Content-Length")
        self.total += int(size or 0)


def write_shard(path: Path, mib: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    path.write_bytes(rng.normal(0, 0.02, mib << 18).astype(np.float32).tobytes())


def raw_upload(store: S3ObjectStore, files: list[Path], prefix: str) -> None:
    with TransferManager(store._client, TransferConfig()) as manager:
        futures = [manager.upload(str(f), store.bucket, f"{prefix}/{f.name}") for f in files]
        for future in futures:
            future.result()


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def fresh_store(endpoint: str) -> S3ObjectStore:
    store = S3ObjectStore(f"w-{uuid.uuid4().hex[:12]}", "ckpt", endpoint_url=endpoint)
    store.put_bytes("ready", b"1")  # bucket created before anything is timed
    return store


def one_run(endpoint: str, src: Path, files: list[Path], mib: int, seed: int) -> dict:
    row: dict[str, float] = {}
    raw = fresh_store(endpoint)
    row["raw full"] = timed(lambda: raw_upload(raw, files, "full"))
    store = fresh_store(endpoint)
    sent = SentBytes(store._client)
    cache = DigestCache()
    row["commit full"] = timed(lambda: commit_checkpoint(store, JOB, src, 0, digests=cache))
    row["commit full MiB sent"] = sent.total / (1 << 20)
    frozen = fresh_store(endpoint)
    row["staging copy"] = timed(lambda: commit_checkpoint(NoStreaming(frozen), JOB, src, 0,
                                                          digests=DigestCache()))
    write_shard(files[seed % len(files)], mib, seed)
    row["raw one"] = timed(lambda: raw_upload(raw, [files[seed % len(files)]], "one"))
    sent.total = 0
    row["commit incremental"] = timed(lambda: commit_checkpoint(store, JOB, src, 0,
                                                                digests=cache))
    row["commit incremental MiB sent"] = sent.total / (1 << 20)
    write_shard(files[(seed + 1) % len(files)], mib, seed + 1000)
    sent.total = 0
    row["incremental, cache cold"] = timed(lambda: commit_checkpoint(
        store, JOB, src, 0, digests=DigestCache()))
    row["cache cold MiB sent"] = sent.total / (1 << 20)
    return row


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def render(rows: list[dict], args: argparse.Namespace, loadavg: tuple[str, str],
           runtime_s: float) -> str:
    total_mib = args.files * args.mib
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    lines = [
        MARKER,
        "",
        "# Checkpoint commits at the speed of the wire (real S3 server)",
        "",
        f"- command: `python -m benchmarks.checkpoints.wire --files {args.files} "
        f"--mib {args.mib} --runs {args.runs}`",
        f"- machine: {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores, SHARED: a CI run and other helpers ran meanwhile; "
        f"date {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit}; runtime "
        f"{runtime_s:.0f} s",
        f"- `cat /proc/loadavg` before: `{loadavg[0]}`; after: `{loadavg[1]}`",
        f"- {args.files} files × {args.mib} MiB = {total_mib} MiB of float32 weights to "
        "SeaweedFS `weed mini` on 127.0.0.1 (the server shares the 2 cores); raw = boto3 "
        "TransferManager, default TransferConfig, all files at once; the commit streams "
        "through the same TransferConfig; each round's steps run back to back, so ratios "
        "compare like with like",
        "",
        "| run | raw full s | commit full s | raw ÷ commit | staging copy s | raw ÷ staging |"
        " raw one s | commit incremental s | incremental ÷ raw one | incremental, cache cold s "
        "| MiB sent: full / incremental / cold |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for i, r in enumerate(rows, 1):
        lines.append(
            f"| {i} | {r['raw full']:.2f} | {r['commit full']:.2f} | "
            f"{r['raw full'] / r['commit full']:.2f} | {r['staging copy']:.2f} | "
            f"{r['raw full'] / r['staging copy']:.2f} | {r['raw one']:.2f} | "
            f"{r['commit incremental']:.2f} | {r['commit incremental'] / r['raw one']:.2f} | "
            f"{r['incremental, cache cold']:.2f} | {r['commit full MiB sent']:.0f} / "
            f"{r['commit incremental MiB sent']:.0f} / {r['cache cold MiB sent']:.0f} |")
    ratio = statistics.median(r["raw full"] / r["commit full"] for r in rows)
    staging = statistics.median(r["raw full"] / r["staging copy"] for r in rows)
    incr = statistics.median(r["commit incremental"] / r["raw one"] for r in rows)
    share = median(rows, "commit incremental") / median(rows, "commit full")
    lines += [
        "",
        f"Medians: a full commit reaches **{ratio:.2f} ×** the raw upload's throughput "
        f"(staging-copy commit {staging:.2f} ×); an incremental commit of 1 of {args.files} "
        f"files takes {median(rows, 'commit incremental'):.2f} s = **{incr:.2f} ×** the raw "
        f"upload of that one file and {share:.2f} of a full commit (its bytes: "
        f"{1 / args.files:.2f}); with the digest cache cold it takes "
        f"{median(rows, 'incremental, cache cold'):.2f} s (every file hashed again, one "
        "uploaded).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = Path("/proc/loadavg").read_text().strip()
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="ga-bench-wire-"))
    (work / "weed").mkdir()
    server = start_s3(work / "weed")
    for name, value in server.credentials_env().items():
        os.environ[name] = value
    try:
        src = work / "checkpoint"
        src.mkdir()
        files = [src / f"shard{i}.bin" for i in range(args.files)]
        for i, path in enumerate(files):
            write_shard(path, args.mib, i)
        rows = []
        for run in range(args.runs):
            rows.append(one_run(server.endpoint_url, src, files, args.mib, 100 + run))
            print(run + 1, {k: round(v, 2) for k, v in rows[-1].items()}, flush=True)
    finally:
        server.stop(signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
    text = render(rows, args, (load_before, Path("/proc/loadavg").read_text().strip()),
                  time.perf_counter() - started)
    old = args.out.read_text() if args.out.exists() else ""
    kept = old.split(MARKER)[0].rstrip("\n")
    args.out.write_text((kept + "\n\n" if kept else "") + text)
    print(text)


if __name__ == "__main__":
    main()

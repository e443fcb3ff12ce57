"""The agent's progress-file reader (scheduler.agent.progress) and the job-side helper
(scheduler.progress) on real files: appends, partial lines, huge lines, garbage, truncation,
replacement, a missing file."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.models.work import WorkUnit
from scheduler import progress
from scheduler.agent.progress import (
    MAX_LINE_BYTES,
    MAX_READ_BYTES,
    ProgressFile,
    parse_line,
)

READ_AT = datetime(2025, 12, 1, 19, 0, tzinfo=UTC)  # UNIX time 1764615600


def append(path: Path, text: str | bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(text.encode() if isinstance(text, str) else text)


def test_no_file_is_no_progress(tmp_path: Path) -> None:
    reader = ProgressFile(tmp_path / "progress.jsonl")
    assert reader.poll(READ_AT) is None
    assert (reader.first, reader.latest, reader.bad_lines) == (None, None, 0)


def test_keeps_first_and_latest_and_reads_only_what_was_appended(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    reader = ProgressFile(path)
    append(path, '{"samples": 640, "total": 2880000, "t": 1764615600}\n')
    first = reader.poll(READ_AT)
    assert first is not None and first.unit is WorkUnit.SAMPLES and first.done == 640
    assert first.total == 2880000 and first.at == datetime(2025, 12, 1, 19, 0, tzinfo=UTC)
    append(path, '{"samples": 1280, "t": 1764615601.5}\n{"samples": 1920}\n')
    latest = reader.poll(READ_AT)
    # No t: the time the agent read it.
    assert latest is not None and latest.done == 1920 and latest.at == READ_AT
    assert latest.total is None and reader.first == first
    assert reader.poll(READ_AT) == latest  # nothing new
    assert reader.bad_lines == 0


def test_a_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    reader = ProgressFile(path)
    append(path, '{"steps": 10}\n{"steps": 2')
    assert reader.poll(READ_AT).done == 10
    append(path, '0}\n')
    assert reader.poll(READ_AT).done == 20 and reader.bad_lines == 0


def test_garbage_is_counted_and_ignored(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    reader = ProgressFile(path)
    lines = [
        b"not json", b"[1, 2]", b'{"samples": -1}', b'{"samples": NaN}', b'{"samples": true}',
        b'{"samples": 1, "steps": 2}', b'{"loss": 0.5}', b'{"samples": 1, "total": 0}',
        b'{"samples": 1, "t": 1764615600000000}', b'{"samples": "12"}', b"\xff\xfe{}",
        b'{"samples": 1e400}', b'{"samples": 1e19}',
        b"", b"   ",  # blank lines: neither points nor errors
        b'{"tokens": 5, "loss": 2.1}',  # other keys are ignored
        b'{"samples": 7}',  # a unit other than the attempt's first point's
    ]
    append(path, b"\n".join(lines) + b"\n")
    latest = reader.poll(READ_AT)
    assert latest is not None and latest.unit is WorkUnit.TOKENS and latest.done == 5
    assert reader.bad_lines == 14


def test_a_huge_line_is_skipped_even_across_reads(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    reader = ProgressFile(path)
    append(path, '{"steps": 1}\n{"steps": 2, "pad": "' + "x" * (MAX_LINE_BYTES + 10))
    assert reader.poll(READ_AT).done == 1 and reader.skipped_long == 1
    append(path, "y" * 100 + '"}\n{"steps": 3}\n')  # the rest of the huge line, then a good one
    assert reader.poll(READ_AT).done == 3
    assert (reader.skipped_long, reader.bad_lines) == (1, 0)
    append(path, '{"steps": 4, "pad": "' + "z" * (MAX_LINE_BYTES + 1) + '"}\n{"steps": 5}\n')
    assert reader.poll(READ_AT).done == 5 and reader.skipped_long == 2


def test_a_flood_is_read_from_its_last_64_kib(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    reader = ProgressFile(path)
    append(path, '{"samples": 0}\n')
    reader.poll(READ_AT)
    # 200 KiB appended between two polls: one poll reads 64 KiB and still ends at the newest.
    text = "".join(f'{{"samples": {i}}}\n' for i in range(1, 20001))
    assert len(text) > 3 * MAX_READ_BYTES
    append(path, text)
    assert reader.poll(READ_AT).done == 20000
    assert reader.first.done == 0 and reader.bad_lines == 0


def test_a_truncated_or_replaced_file_is_reread_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    reader = ProgressFile(path)
    append(path, '{"steps": 100}\n{"steps": 200}\n')
    assert reader.poll(READ_AT).done == 200
    path.write_text('{"steps": 150}\n')  # truncated and rewritten, shorter than before
    assert reader.poll(READ_AT).done == 150
    replacement = tmp_path / "new.jsonl"
    replacement.write_text('{"steps": 300}\n{"steps": 310}\n')  # longer: only the inode tells
    os.replace(replacement, path)
    assert reader.poll(READ_AT).done == 310
    assert reader.first.done == 100  # still the attempt's first point


def test_an_unreadable_path_never_raises(tmp_path: Path) -> None:
    (tmp_path / "progress.jsonl").mkdir()
    reader = ProgressFile(tmp_path / "progress.jsonl")
    assert reader.poll(READ_AT) is None


def test_reset_removes_an_old_runs_file(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    append(path, '{"steps": 9}\n')
    reader = ProgressFile(path)
    reader.reset()
    reader.reset()  # quiet without a file
    assert not path.exists() and reader.poll(READ_AT) is None


def test_parse_line_takes_ints_and_floats() -> None:
    point = parse_line(b'{"tokens": 1.5e9, "total": 3e9, "t": 1764615590}', READ_AT)
    assert point is not None and point.done == 1.5e9 and point.total == 3e9
    assert point.at == datetime(2025, 12, 1, 18, 59, 50, tzinfo=UTC)


def test_the_helper_writes_what_the_reader_reads(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "progress.jsonl"
    monkeypatch.delenv(progress.ENV_VAR, raising=False)
    assert progress.report(samples=1) is False and not path.exists()  # outside the scheduler
    monkeypatch.setenv(progress.ENV_VAR, str(path))
    t0 = round(time.time() - 1, 2)
    assert progress.report(samples=64, total=640, t=t0)
    assert progress.report(samples=128)
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"samples": 64, "total": 640, "t": t0}
    assert set(json.loads(lines[1])) == {"samples", "t"}
    reader = ProgressFile(path)  # the helper's t is now: read now
    assert reader.poll().done == 128 and reader.first.total == 640
    monkeypatch.setenv(progress.ENV_VAR, str(tmp_path / "missing-dir" / "p.jsonl"))
    assert progress.report(steps=1) is False  # unwritable: no exception


@pytest.mark.parametrize("kwargs", [
    {}, {"samples": 1, "steps": 1}, {"samples": -1}, {"samples": float("nan")},
    {"samples": True}, {"samples": 1, "total": 0}, {"steps": 1, "t": float("inf")},
])
def test_the_helper_refuses_what_the_format_forbids(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        progress.progress_line(**kwargs)


def test_a_t_far_from_the_read_time_is_refused(tmp_path: Path) -> None:
    # READ_AT is UNIX 1764615600: 60 s ahead and an hour behind are the bounds.
    assert parse_line(b'{"samples": 1, "t": 1764615660}', READ_AT) is not None
    assert parse_line(b'{"samples": 1, "t": 1764615661}', READ_AT) is None
    assert parse_line(b'{"samples": 1, "t": 1764612000}', READ_AT) is not None
    assert parse_line(b'{"samples": 1, "t": 1764611999}', READ_AT) is None
    path = tmp_path / "progress.jsonl"
    reader = ProgressFile(path)
    # year 8307 (the job's clock or unit is wrong): ignored, later points are taken
    append(path, '{"samples": 10, "t": 1764615600}\n{"samples": 1000, "t": 2e11}\n')
    assert reader.poll(READ_AT).done == 10 and reader.bad_lines == 1
    append(path, '{"samples": 20, "t": 1764615610}\n')
    assert reader.poll(READ_AT).done == 20


def test_done_above_total_and_points_older_than_the_first_are_refused(tmp_path: Path) -> None:
    assert parse_line(b'{"samples": 11, "total": 10}', READ_AT) is None
    assert parse_line(b'{"samples": 10, "total": 10}', READ_AT).done == 10
    path = tmp_path / "progress.jsonl"
    reader = ProgressFile(path)
    append(path, '{"samples": 10, "t": 1764615600}\n{"samples": 20, "t": 1764615590}\n')
    assert reader.poll(READ_AT).done == 10 and reader.bad_lines == 1


def test_a_file_rewritten_in_place_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text('{"samples": 1000}\n')
    reader = ProgressFile(path)
    assert reader.poll(READ_AT).done == 1000
    inode = os.stat(path).st_ino
    for done in (2000, 3000, 40000, 500000):  # same inode, same or longer size
        with open(path, "w") as fh:
            fh.write(json.dumps({"samples": done}) + "\n")
        assert reader.poll(READ_AT).done == done
    assert os.stat(path).st_ino == inode and reader.bad_lines == 0
    assert reader.first.done == 1000
    append(path, '{"samples": 500001}\n')  # an append after it is still just an append
    assert reader.poll(READ_AT).done == 500001 and reader.bad_lines == 0

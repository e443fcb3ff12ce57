"""Log setup: JSON lines carry time, level, logger, message and the extra fields; text stays
the default; bad arguments are refused by name."""

from __future__ import annotations

import json
import logging

import pytest

from scheduler.observability.logs import NOISY_LOGGERS, configure


@pytest.fixture(autouse=True)
def restore_logging():
    # configure() also raises the noisy libraries' levels; left raised, later tests that
    # capture botocore's DEBUG lines would see nothing.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    noisy = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in noisy.items():
        logging.getLogger(name).setLevel(old)


def test_json_lines_have_the_fields_and_extras(capsys):
    configure("info", "json")
    log = logging.getLogger("scheduler.controller.reconcile")
    log.info("placed %s", "job-1", extra={"job_id": "job-1", "attempt": 2, "provider": "aws"})
    log.debug("not shown at INFO")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("step failed", extra={"job_id": "job-1"})
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["message"] == "placed job-1" and first["level"] == "INFO"
    assert first["logger"] == "scheduler.controller.reconcile"
    assert (first["job_id"], first["attempt"], first["provider"]) == ("job-1", 2, "aws")
    assert first["time"].endswith("+00:00")
    assert second["level"] == "ERROR" and "RuntimeError: boom" in second["exc_info"]


def test_text_is_the_default_and_configure_twice_does_not_double(capsys):
    configure()
    configure()
    logging.getLogger("x").warning("hello", extra={"job_id": "j"})
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("WARNING x: hello")


@pytest.mark.parametrize("args,field", [(("INFO", "yaml"), "log format"),
                                        (("LOUD", "json"), "log level")])
def test_bad_arguments_are_refused_by_name(args, field):
    with pytest.raises(ValueError, match=field):
        configure(*args)

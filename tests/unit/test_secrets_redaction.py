"""The log backstop: known secret values never reach a log handler's output, in the message,
its arguments or a traceback; other text is untouched."""

from __future__ import annotations

import io
import logging

import pytest

from scheduler.secrets import REDACTED, redact_logs

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "job-1.2.5f0c3a9e1b7d4c2a"


@pytest.fixture
def captured(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("REDIS_URL", "redis://:s3cret-redis-pass@10.0.0.5:6379/0")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    root.addHandler(handler)
    redacting = redact_logs(TOKEN.encode(), "short")
    yield out
    root.removeHandler(handler)
    for other in root.handlers:  # pytest's own capture handlers
        other.removeFilter(redacting)


def test_secrets_are_redacted_in_messages_arguments_and_tracebacks(captured):
    log = logging.getLogger("test.redaction")
    log.warning("upload failed with key %s", SECRET)
    log.warning("agent token " + TOKEN + " refused")
    log.warning("cannot reach redis://:s3cret-redis-pass@10.0.0.5:6379/0")
    try:
        raise RuntimeError(f"signature mismatch for {SECRET}")
    except RuntimeError:
        log.exception("store error")
    log.warning("a short value stays: short")
    text = captured.getvalue()
    for value in (SECRET, TOKEN, "s3cret-redis-pass"):
        assert value not in text
    assert text.count(REDACTED) == 4
    assert "RuntimeError: signature mismatch for [redacted]" in text
    assert "a short value stays: short" in text

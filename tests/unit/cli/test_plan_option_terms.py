"""``schedctl plan`` refusals in the command's terms: the service and the daemon name the
request's fields (``like_job``, ``work.unit``), the command names its options."""

from __future__ import annotations

import pytest

from scheduler.cli.plan import option_terms


@pytest.mark.parametrize(("message", "work", "said"), [
    ("like_job: bert-0001 has measured no throughput yet", None,
     "--like: bert-0001 has measured no throughput yet"),
    ("work.unit: got tokens, but the spec's work is in samples", {"unit": "tokens"},
     "--tokens: got tokens, but the spec's work is in samples"),
    ("work.epochs: got -1; must be a number > 0", {"unit": "steps"}, "--epochs: got -1; must be a number > 0"),
    ("work: no throughput; plan like a job that measured one (like_job), or compute_hours",
     {"unit": "samples"},
     "work: no throughput; plan like a job that measured one (--like), or --compute-hours"),
    # Words that merely contain a field's name are left alone.
    ("lookback: bad like_jobs value", None, "lookback: bad like_jobs value"),
])
def test_fields_become_options(message, work, said):
    assert option_terms(message, work) == said

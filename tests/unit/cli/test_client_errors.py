"""The CLI turns an API error body into a sentence naming the field (FastAPI's 422 lists were
printed raw, as Python reprs)."""

from __future__ import annotations

from scheduler.cli.client import describe


def test_validation_lists_name_the_field_and_the_value():
    detail = [{"type": "less_than_equal", "loc": ["body", "compute_hours"],
               "msg": "Input should be less than or equal to 1000000", "input": "1e400"}]
    assert describe(detail) == ("compute_hours: Input should be less than or equal to 1000000 "
                                "(got '1e400')")
    two = detail + [{"loc": ["query", "since"], "msg": "bad time"}]
    assert describe(two).endswith("; since: bad time")


def test_plain_details_pass_through():
    assert describe("job not found") == "job not found"
    assert describe([{"msg": "odd"}]) == "request: odd"

"""Preemption notices: parsing the documented shapes (shared/data/api_examples) and reading
them from a local IMDSv2 / Alibaba metadata fake."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

import pytest

from core.config import shared_data_dir
from scheduler.agent.notices import (
    AliyunNotices,
    AwsImdsNotices,
    NoNotices,
    make_notice_source,
    parse_aliyun_termination_time,
    parse_aws_instance_action,
    parse_aws_rebalance,
)
from tests.integration.agent.fakes import FakeImds

EXAMPLES = shared_data_dir() / "api_examples"
needs_examples = pytest.mark.skipif(
    not EXAMPLES.is_dir(), reason=f"shared API examples not found at {EXAMPLES} (set GA_DATA_DIR)")


@needs_examples
@pytest.mark.parametrize("name, action", [("imds_spot_instance-action_terminate.json", "terminate"),
                                          ("imds_spot_instance-action_stop.json", "stop")])
def test_aws_instance_action_examples(name: str, action: str) -> None:
    notice = parse_aws_instance_action((EXAMPLES / "aws_ec2" / name).read_text())
    assert notice.action == action
    assert notice.action_at == datetime(2017, 9, 18, 8, 22, tzinfo=UTC)
    assert notice.received_at is not None and notice.received_at.tzinfo is not None


@needs_examples
def test_aws_rebalance_example() -> None:
    body = (EXAMPLES / "aws_ec2" / "imds_events_recommendations_rebalance.json").read_text()
    assert parse_aws_rebalance(body) == datetime(2020, 10, 27, 8, 22, tzinfo=UTC)


def _aliyun_documented_examples() -> list[str]:
    """The termination-time examples in Alibaba's docs: the metadata item table and the
    interruption-events page."""
    docs = EXAMPLES / "aliyun_ecs" / "source_md"
    items = (docs / "InstanceMetadataItems.md").read_text()
    row = next(line for line in items.splitlines() if "/spot/termination-time|" in line)
    events = (docs / "PreemptibleInterruptionEvents.md").read_text()
    return [row.strip("|").split("|")[-1], *re.findall(r"Example: `([^`]+)`", events)]


@needs_examples
def test_aliyun_termination_time_examples() -> None:
    examples = _aliyun_documented_examples()
    assert examples == ["2020-04-07T17:03:00Z", "2015-01-05T18:02:00Z"]
    notice = parse_aliyun_termination_time(examples[0] + "\n")
    assert notice.action == "terminate"
    assert notice.action_at == datetime(2020, 4, 7, 17, 3, tzinfo=UTC)
    aws_legacy = (EXAMPLES / "aws_ec2" / "imds_spot_termination-time_example.txt").read_text()
    assert parse_aliyun_termination_time(aws_legacy).action_at.year == 2015  # same text format


@pytest.mark.parametrize("body", ["", "not json", "[]", '{"action": "terminate"}',
                                  '{"action": "terminate", "time": "yesterday"}',
                                  '{"action": "terminate", "time": "2017-09-18T08:22:00"}'])
def test_aws_instance_action_rejects_odd_bodies(body: str) -> None:
    with pytest.raises(ValueError):
        parse_aws_instance_action(body)


@pytest.mark.parametrize("text", ["", "none", "2020-04-07"])
def test_aliyun_rejects_non_times(text: str) -> None:
    with pytest.raises(ValueError):
        parse_aliyun_termination_time(text)


def test_imdsv2_notice_with_token_refresh(fake_imds: FakeImds) -> None:
    source = AwsImdsNotices(fake_imds.base_url + "/")
    assert source.poll() is None and source.rebalance_recommendation() is None
    assert fake_imds.token_puts == 1
    action_at = fake_imds.set_notice("stop", in_s=120)
    fake_imds.rebalance = {"noticeTime": "2020-10-27T08:22:00Z"}
    fake_imds.expire_tokens()  # the next GET gets 401: the source must fetch a new token
    notice = source.poll()
    assert notice is not None and (notice.action, notice.action_at) == ("stop", action_at)
    assert fake_imds.token_puts == 2
    assert source.rebalance_recommendation() == datetime(2020, 10, 27, 8, 22, tzinfo=UTC)
    source.close()


def test_unreachable_metadata_means_no_notice_logged_once(
    fake_imds: FakeImds, caplog: pytest.LogCaptureFixture
) -> None:
    fake_imds.stop()
    sources = [AwsImdsNotices(fake_imds.base_url), AliyunNotices(fake_imds.base_url)]
    with caplog.at_level(logging.WARNING, logger="scheduler.agent.notices"):
        for source in sources:
            assert [source.poll() for _ in range(3)] == [None, None, None]
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 2


def test_aliyun_notice(fake_imds: FakeImds) -> None:
    source = make_notice_source("aliyun", fake_imds.base_url)
    assert isinstance(source, AliyunNotices) and source.poll() is None
    fake_imds.aliyun_termination_time = "2026-11-30T12:05:00Z"
    notice = source.poll()
    assert notice is not None and notice.action_at == datetime(2026, 11, 30, 12, 5, tzinfo=UTC)
    fake_imds.aliyun_termination_time = "not-a-time"
    assert source.poll() is None


def test_flavors() -> None:
    assert isinstance(make_notice_source("none", None), NoNotices)
    assert make_notice_source("aws", None).base_url == "http://169.254.169.254"
    assert make_notice_source("azure", None).base_url == "http://169.254.169.254"
    assert make_notice_source("gcp", None).base_url == "http://metadata.google.internal"
    with pytest.raises(ValueError, match="gcp"):
        make_notice_source("vastai", None)


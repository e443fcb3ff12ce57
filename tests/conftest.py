"""Shared fixtures and the two test tiers.

Real servers only: Redis (tests/fixtures/redis_server.py) and S3 (tests/fixtures/s3_server.py:
SeaweedFS ``weed mini``); only the clouds are faked (tests/fakes/, tests/contract/).

Tiers: ``python3 -m pytest`` is the fast tier, every test but those marked ``e2e`` (real
daemons running training jobs, tests/e2e/) or ``slow`` (integration modules that take many
seconds each). ``python3 -m pytest --full`` is the whole suite, what ``.ci/run`` runs. Naming
test paths, or a ``-m`` expression, selects exactly what was named, tiers aside.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures.redis_server", "tests.fixtures.s3_server", "tests.fixtures.browser",
                  "tests.fixtures.redis_cluster"]

# Marks left out of the fast tier.
FULL_ONLY = ("e2e", "slow")

# Integration modules marked ``slow`` here, in one place: each spends wall time on real
# processes or real waits (agents booting and checkpointing, replay cloud processes and their
# market clocks, daemons, moto, fuzzers, long polls, imports of the real price dumps): 4-50 s
# per module on two shared cores (``--durations``), about half of the integration tests'
# time. The controller rules that
# tests/integration/controller checks this way run in milliseconds in the fast tier over
# the in-memory cloud (tests/fakes, tests/unit/controller).
SLOW_MODULES = frozenset(f"tests/integration/{m}.py" for m in (
    "agent/test_agent_progress",
    "agent/test_agent_run",
    "agent/test_agent_run_azure_gcp",
    "agent/test_agent_sync",
    "agent/test_gang_agent",
    "agent/test_aws_imds_bootstrap",
    "agent/test_job_user",
    "agent/test_output_through_daemon_outage",
    "aliyun/test_agent_notice",
    "api/test_fuzz_agent_report",
    "api/test_bad_times",
    "api/test_fuzz_openapi",
    "api/test_auth_hardening",
    "api/test_spec_limits",
    "aws/test_lifecycle_moto",
    "aws/test_offers_moto",
    "checkpoints/test_checkpoint_stores",
    "cli/test_status_watch",
    "cli/test_users_cli",
    "checkpoints/test_retention_compression",
    "controller/test_cost_to_finish",
    "controller/test_held_price",
    "controller/test_policy_v2",
    "controller/test_price_records",
    "controller/test_reconcile",
    "controller/test_waste",
    "dashboard/test_live_updates",
    "dashboard/test_budget_fleet_users_pages",
    "dashboard/test_market_pages",
    "dashboard/test_pages_browser",
    "agent/test_notice_hostile_metadata",
    "controller/test_batched_reviews",
    "fleet/test_ledger",
    "history/test_query_columns_equal",
    "store/test_sentinel_write_race",
    "fleet/test_describe_safety",
    "fleet/test_failures",
    "fleet/test_hostile_hosts",
    "fleet/test_hosts",
    "fleet/test_lifecycle",
    "fleet/test_real_agent",
    "history/test_import_real",
    "history/test_history_cluster",
    "history/test_api_cli",
    "history/test_offer_price_age",
    "history/test_replay_vs_real",
    "observability/test_daemon_logs",
    "observability/test_events",
    "planning/test_plan_cli_fresh_home",
    "planning/test_plan_matches_placement",
    "planning/test_plan_work",
    "replay/test_replay_cloud",
    "replay/test_replay_notice_styles",
    "store/test_cluster_failover",
    "store/test_embedded_redis_cli",
    "store/test_sentinel_failover",
    "store/test_store",
    "test_ddp_example",
)) | frozenset({
    # random-instance equivalence tests: each instance solves its own lookahead tables
    "tests/unit/policies/test_placement_pairs.py",
    "tests/unit/policies/test_migrate_many.py",
})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true",
                     help="the whole suite: the fast tier plus the tests marked e2e or slow")


def _fast_tier(config: pytest.Config) -> bool:
    return not (config.getoption("full") or config.option.markexpr
                or config.args_source is not pytest.Config.ArgsSource.TESTPATHS)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects on the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(config.rootpath).as_posix() in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    if not _fast_tier(config):
        return
    left_out = {id(i) for i in items if any(i.get_closest_marker(m) for m in FULL_ONLY)}
    if left_out:
        config.hook.pytest_deselected(items=[i for i in items if id(i) in left_out])
        items[:] = [i for i in items if id(i) not in left_out]


def pytest_report_header(config: pytest.Config) -> str:
    if _fast_tier(config):
        return "fast tier: tests marked e2e or slow are left out (--full runs them)"
    return "tier: " + ("full" if config.getoption("full") else "as selected")

"""Pure translation (providers/vastai/translate.py): the documented search row → offers of both
markets, GPU names, places, and instance rows (the observed abandoned row, an outbid) →
instance states."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.models import InstanceState, Market, OfferKey
from providers.vastai.translate import (
    ENV_OFFER,
    ENV_TAGS,
    gpu_model,
    instance_from_row,
    instance_state,
    location,
    offer_from_row,
    offers_from_rows,
)
from tests.contract.providers.vastai.data import (
    ask,
    example,
    needs_examples,
    observed_row,
)

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
pytestmark = needs_examples


def test_the_observed_row_becomes_a_spot_and_an_on_demand_offer() -> None:
    spot = offer_from_row(observed_row(), Market.SPOT, T0)
    on_demand = offer_from_row(observed_row(), Market.ON_DEMAND, T0)
    assert spot.key == OfferKey(provider="vastai", region="cn", zone="cn-guangxi",
                                instance_type="m22990.1xRTX4090", market=Market.SPOT)
    assert (spot.gpu_model, spot.gpu_count, spot.vcpus) == ("RTX4090", 1, 24)
    assert spot.vram_gib == pytest.approx(24564 / 1024)  # per GPU, nvidia-smi MiB
    assert spot.memory_gib == pytest.approx(64393 / 1024)
    assert spot.price_usd_per_hour == 0.2  # min_bid
    assert spot.on_demand_price_usd_per_hour == pytest.approx(0.2466759259)
    assert spot.interruption_risk == pytest.approx(1 - 0.9700835)
    assert spot.interruption_notice_s == 0  # an outbid instance just stops
    assert on_demand.price_usd_per_hour == pytest.approx(0.2466759259)
    assert (on_demand.interruption_risk, on_demand.interruption_notice_s) == (0.0, None)
    assert on_demand.instance_type == spot.instance_type and "/" not in spot.instance_type


@pytest.mark.parametrize(("vast", "ours"), [
    ("RTX 4090", "RTX4090"), ("H100 SXM", "H100"), ("H100 NVL", "H100"), ("A100 SXM4", "A100"),
    ("A100 PCIE", "A100"), ("Tesla V100", "V100"), ("RTX A6000", "RTXA6000"),
    ("RTX 6000Ada", "RTX6000-Ada"), ("RTX 5880Ada", "RTX5880-Ada"),
    ("RTX PRO 6000 WS", "RTXPRO6000WS"), ("L40S", "L40S"), ("RTX_3090", "RTX3090"),
])
def test_gpu_names_take_the_catalogs_spelling(vast: str, ours: str) -> None:
    assert gpu_model(vast) == ours


@pytest.mark.parametrize(("vast", "gpu_ram_mib", "ours"), [
    ("A100 SXM4", 81920, "A100-80GB"), ("A100 PCIE", 40960, "A100"),
    ("Tesla V100", 32768, "V100-32GB"), ("Tesla V100", 16384, "V100"),
    ("RTX 4090", 24564, "RTX4090"), ("H100 NVL", 96256, "H100"),
])
def test_boards_vast_names_alike_are_told_apart_by_their_memory(vast: str, gpu_ram_mib: int,
                                                                 ours: str) -> None:
    """Vast calls both A100 sizes "A100" (and both V100s "V100"); the GPU table's speeds are
    per variant, so the offer is named by its memory (within 10 %)."""
    offer = offer_from_row(ask(gpu_name=vast, gpu_ram=gpu_ram_mib), Market.ON_DEMAND, T0)
    assert offer.gpu_model == ours and offer.vram_gib == gpu_ram_mib / 1024


def test_places_become_country_regions_and_place_zones() -> None:
    assert location("Guangxi, CN") == ("cn", "cn-guangxi")
    assert location("South Korea, KR") == ("kr", "kr-south-korea")
    assert location("US") == ("us", "us")
    assert location(None) == location("") == location("Atlantis") == ("unknown", "unknown")


def test_malformed_rows_are_skipped_and_a_host_listed_twice_keeps_the_cheaper() -> None:
    rows = [ask(id=1, min_bid=0.3), ask(id=2, min_bid=0.25), ask(id=3, gpu_ram=None),
            ask(id=4, min_bid=None), ask(id=5, machine_id=1, dph_total="x")]
    offers, skipped = offers_from_rows(rows, Market.SPOT, T0)
    assert skipped == 3
    [(offer, chosen)] = offers.values()
    assert (offer.price_usd_per_hour, chosen.ask_id) == (0.25, 2)
    on_demand, skipped = offers_from_rows([ask(id=4, min_bid=None)], Market.ON_DEMAND, T0)
    assert len(on_demand) == 1 and skipped == 0  # no bid needed on-demand


def _row(**changes: object) -> dict:
    key = "vastai/cn/cn-guangxi/m22990.1xRTX4090/spot"
    return {"id": 7, "label": "gpu-arbiter:job-1-1", "start_date": 1787722703.0,
            "actual_status": "running", "intended_status": "running", "cur_state": "running",
            "next_state": "running", "status_msg": None,
            "extra_env": {ENV_OFFER: key, ENV_TAGS: '{"gpu-arbiter:job":"job-1"}'}} | changes


def test_an_outbid_instance_is_preempted_without_notice() -> None:
    stopped = instance_from_row(_row(actual_status="stopped", intended_status="stopped"))
    assert stopped is not None
    assert (stopped.state, stopped.terminated_reason, stopped.notice) == (
        InstanceState.TERMINATED, "preempted: outbid", None)
    stopping = instance_from_row(_row(intended_status="stopped", next_state="stopped"))
    assert stopping is not None and stopping.state is InstanceState.SHUTTING_DOWN
    assert stopping.terminated_reason == "preempted: outbid"
    assert stopping.tags == {"gpu-arbiter:job": "job-1"} and stopping.client_token == "job-1-1"


def test_the_observed_abandoned_row_is_a_host_failure_not_an_outbid() -> None:
    row = example("instance_row_abandoned_observed.json")
    state, reason = instance_state(row, Market.SPOT)
    assert state is InstanceState.TERMINATED and reason is not None
    assert reason.startswith("host failed: Error response from daemon")
    assert instance_state(row | {"status_msg": None}, Market.ON_DEMAND) == (
        InstanceState.TERMINATED, "stopped")


@pytest.mark.parametrize(("actual", "state"), [
    (None, InstanceState.PENDING), ("created", InstanceState.PENDING),
    ("loading", InstanceState.PENDING), ("running", InstanceState.RUNNING),
    ("exited", InstanceState.TERMINATED), ("offline", InstanceState.TERMINATED),
    ("unknown", InstanceState.TERMINATED), ("something-new", InstanceState.PENDING),
])
def test_actual_status_values(actual: str | None, state: InstanceState) -> None:
    assert instance_state(_row(actual_status=actual), Market.SPOT)[0] is state


def test_rows_not_ours_are_left_out_and_ours_malformed_refused() -> None:
    assert instance_from_row(_row(label="someone's notebook")) is None
    assert instance_from_row(_row(label=None)) is None
    with pytest.raises(ValueError, match="GA_OFFER"):
        instance_from_row(_row(extra_env={}))
    with pytest.raises(ValueError, match="start_date"):
        instance_from_row(_row(start_date=None))

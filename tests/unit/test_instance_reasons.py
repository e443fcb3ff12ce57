"""Which ``terminated_reason`` counts as a preemption (the controller bills and counts it so)."""

from __future__ import annotations

import pytest

from core.models import Instance, InstanceState, Market, OfferKey, utcnow


def _ended(reason: str | None) -> Instance:
    key = OfferKey(provider="p", region="r", zone="z", instance_type="t", market=Market.SPOT)
    return Instance(id="i", provider="p", offer=key, client_token="c",
                    state=InstanceState.TERMINATED, launched_at=utcnow(),
                    terminated_reason=reason)


@pytest.mark.parametrize("reason, preempted", [
    ("preempted", True), ("preempted: outbid", True),
    ("preemptedx", False), ("stopped", False), (None, False), ("host failed: preempted", False),
])
def test_preempted_is_the_reason_alone_or_with_the_markets_words(reason, preempted):
    assert _ended(reason).preempted is preempted

"""Ever-listed names in a real Redis: kept across polls that no longer list them, and bounded
(a full set stops growing and is no longer used to judge names)."""

from __future__ import annotations

from policies.constraints import unknown_names
from scheduler.store.known_names import KnownNames
from tests.factories.jobs import spec
from tests.factories.offers import offer


def test_names_stay_known_after_an_offer_goes(redis_client):
    names = KnownNames(redis_client)
    assert names.names() == dict.fromkeys(("provider", "region", "zone", "gpu_model",
                                           "instance_type"))
    names.record([offer(), offer(region="eu-west-1", zone="eu-west-1a", gpu_model="A10G")])
    names.record([offer()])  # a later poll without the eu-west-1 offer
    known = names.names()
    assert known["region"] == {"us-west-2", "eu-west-1"}
    assert known["gpu_model"] == {"V100", "A10G"} and known["instance_type"] == {"p3.2xlarge"}
    assert unknown_names(spec(regions={"allow": ["eu-west-1"]}), known) == []


def test_a_full_set_stops_growing_and_judges_nothing(redis_client):
    names = KnownNames(redis_client, max_names=3)
    names.record([offer(zone=f"z{i}") for i in range(2)])
    assert names.names()["zone"] == {"z0", "z1"}
    names.record([offer(zone=f"z{i}") for i in range(2, 5)])  # under the bound: takes the poll
    names.record([offer(zone="z9")])                           # full: ignored
    assert redis_client.scard("ga:known:zone") == 5
    assert names.names()["zone"] is None
    assert unknown_names(spec(zones={"allow": ["nowhere"]}), names.names()) == []

"""'Nothing fits' answers a user can act on: the figures the rejected offers report, and the
spec's names no provider ever listed, with the closest ones."""

from __future__ import annotations

from policies.constraints import explain_no_fit, rejection_details, unknown_names
from tests.factories.jobs import spec
from tests.factories.offers import offer

# EC2 DescribeInstanceTypes reports A10G memory as 22,888 MiB (the AWS adapter divides by 1024).
A10G = offer(instance_type="g5.xlarge", gpu_model="A10G", vram_gib=22888 / 1024)
T4 = offer(instance_type="g4dn.xlarge", gpu_model="T4", vram_gib=15, zone="us-west-2b")
T4_OD = offer(instance_type="g4dn.xlarge", gpu_model="T4", vram_gib=15, market="on-demand",
              price_usd_per_hour=0.526, interruption_risk=0)


def test_min_vram_names_the_sizes_offers_report():
    text = explain_no_fit(spec(resources={"gpu_count": 1, "min_vram_gib": 24}), [A10G, T4, T4_OD])
    assert text.startswith("no offer fits: 3 offers (spot and on-demand counted apart), 0 eligible")
    assert "min_vram_gib rejects 3 offers under 24 GiB per GPU: A10G 22.35 GiB = 22,888 MiB " \
           "as aws reports it, T4 15 GiB" in text
    # A size that is not a whole number of MiB is shown as written (no invented MiB).
    hand_written = offer(gpu_model="A10G", vram_gib=22.35)
    assert "A10G 22.35 GiB" in explain_no_fit(spec(resources={"min_vram_gib": 24}), [hand_written])
    assert "MiB" not in explain_no_fit(spec(resources={"min_vram_gib": 24}), [hand_written])


def test_price_and_other_numeric_limits_give_the_nearest_rejected_figure():
    offers = [offer(price_usd_per_hour=1.30), offer(zone="us-west-2b", price_usd_per_hour=2.0),
              offer(zone="us-west-2c", price_usd_per_hour=0.5)]
    details = rejection_details(spec(max_price_usd_per_hour=1.0), offers)
    assert details == {"max_price_usd_per_hour": "max_price_usd_per_hour rejects 2 offers above "
                       "$1.0000/h: the cheapest of them is $1.3000/h (aws/us-west-2a p3.2xlarge "
                       "spot)"}
    details = rejection_details(spec(resources={"gpu_count": 8, "min_vcpus": 16,
                                                "min_memory_gib": 128},
                                     max_interruption_risk=0.05), [offer(), offer(gpu_count=4)])
    assert details["gpu_count"] == "gpu_count rejects 2 offers under 8 GPUs: the largest has 4"
    assert details["min_vcpus"].endswith("under 16 vCPUs: the largest has 8")
    assert details["min_memory_gib"].endswith("the largest has 61 GiB")
    assert details["max_interruption_risk"].endswith("above 0.05: the lowest of them is 0.1")


def test_every_rejecting_constraint_is_still_named():
    text = explain_no_fit(spec(resources={"min_vram_gib": 24, "gpu_models": ["H100"]},
                               market="on-demand"), [A10G, T4])
    assert "gpu_models rejects 2" in text and "market rejects 2" in text
    assert "min_vram_gib rejects 2 offers" in text


def test_unknown_names_with_the_closest_known():
    known = {"provider": {"aws", "gcp"}, "region": {"us-west-1", "us-west-2", "us-east-1"},
             "zone": {"us-west-2a", "us-west-2b"}, "gpu_model": {"A10G", "T4", "V100"}}
    warnings = unknown_names(spec(regions={"allow": ["us-west2"]},
                                  resources={"gpu_models": ["a10g", "A100x"]},
                                  zones={"deny": ["us-west-2z"]}, providers={"allow": ["aws"]}),
                             known)
    assert warnings[0].startswith("regions.allow: 'us-west2' matches no region any configured "
                                  "provider has listed (closest: us-west-2")
    assert warnings[1].startswith("zones.deny: 'us-west-2z' matches no zone")
    assert "us-west-2a" in warnings[1] and "us-west-2b" in warnings[1]
    # GPU models match case-insensitively, as placement does: only A100x is unknown.
    assert warnings[2].startswith("resources.gpu_models: 'A100x' matches no gpu model")
    assert len(warnings) == 3


def test_names_of_an_attribute_never_listed_are_not_judged():
    assert unknown_names(spec(regions={"allow": ["mars-1"]}), {"region": None}) == []
    assert unknown_names(spec(regions={"allow": ["mars-1"]}), {}) == []


def test_no_fit_ends_with_the_unknown_names():
    text = explain_no_fit(spec(regions={"allow": ["us-west2"]}), [offer()],
                          known={"region": {"us-west-2"}})
    assert "regions rejects 1" in text
    assert text.endswith("regions.allow: 'us-west2' matches no region any configured provider "
                         "has listed (closest: us-west-2)")


def test_the_example_market_reports_a10g_memory_as_ec2_does():
    from core.config import examples_dir
    from providers.replay.market import load_market
    from tests.factories.offers import T0

    market = load_market(examples_dir() / "market.yaml")
    offers = market.offers_at(market.start_market_s, T0)
    text = explain_no_fit(spec(resources={"gpu_count": 1, "min_vram_gib": 24}), offers)
    assert "A10G 22.35 GiB = 22,888 MiB as aws reports it" in text


def test_a_pinned_job_is_told_about_its_allowed_providers_only():
    lab_2x = offer(provider="lab", instance_type="box1.2xRTX4090", gpu_model="RTX4090",
                   gpu_count=2, vram_gib=24, market="on-demand", interruption_risk=0)
    pinned = spec(resources={"gpu_count": 1, "min_vram_gib": 16}, providers={"allow": ["lab"]})
    text = explain_no_fit(pinned, [A10G, T4, T4_OD])
    assert "the allowed providers (lab) list no offer now" in text
    assert "min_vram_gib" not in text and "providers rejects" not in text
    text = explain_no_fit(pinned.model_copy(update={"resources": pinned.resources.model_copy(
        update={"min_vram_gib": 48})}), [A10G, lab_2x])
    assert text.startswith("no offer fits: 1 offers") and "RTX4090 24 GiB" in text

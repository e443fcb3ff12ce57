"""Bounds on a replayed notice's length: the market file refuses an unrepresentable one, and the
reclaimer keeps warning every other instance when one instance's record cannot be handled."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.models import OfferKey
from providers.replay import procs
from providers.replay.instances import ReplayCloud
from providers.replay.market import MarketError, Notice, load_market

START = datetime(2026, 1, 1, tzinfo=UTC)
OFFER = ("{{provider: azure, region: r, zone: {zone}, instance_type: {zone}, gpu_model: T4, "
         "gpu_count: 1, vram_gib: 16, vcpus: 4, memory_gib: 16, spot_price_usd_per_hour: 0.1, "
         "notice: {{style: azure, seconds: {seconds}}}}}")


def _write(tmp_path: Path, *seconds: str, notice_seconds: str = "30") -> Path:
    offers = "".join(f"\n  - {OFFER.format(zone=f'z{i}', seconds=s)}"
                     for i, s in enumerate(seconds))
    path = tmp_path / "m.yaml"
    path.write_text(f"name: n\nnotice_seconds: {notice_seconds}\noffers:{offers}\n")
    return path


@pytest.mark.parametrize("seconds, notice_seconds, field", [
    ("1.0e+12", "30", "offers[0].notice.seconds"),
    ("86401", "30", "offers[0].notice.seconds"),
    ("30", "1.0e+12", "notice_seconds"),
])
def test_a_notice_longer_than_a_day_names_the_field(tmp_path: Path, seconds: str,
                                                    notice_seconds: str, field: str) -> None:
    with pytest.raises(MarketError, match=re.escape(field)):
        load_market(_write(tmp_path, seconds, notice_seconds=notice_seconds))


def test_a_day_long_notice_is_allowed(tmp_path: Path) -> None:
    market = load_market(_write(tmp_path, "86400"))
    assert market.notice_of(market.offers[0]).seconds == 86400


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[ReplayCloud]:
    clock = {"now": START}
    made = ReplayCloud(load_market(_write(tmp_path, "30", "30")), tmp_path / "state",
                       ["sleep", "300"], now=lambda: clock["now"])
    made.clock_for_test = clock  # type: ignore[attr-defined]
    yield made
    for rec in made.store.data.instances.values():
        procs.signal_group(rec.pid, signal.SIGKILL)


def test_one_unhandleable_instance_does_not_stop_the_others_notices(
        cloud: ReplayCloud, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = []
    for offer in cloud.offers():
        key = OfferKey(provider=offer["provider"], region=offer["region"], zone=offer["zone"],
                       instance_type=offer["instance_type"], market=offer["market"])
        status, view = cloud.launch({"offer": key.model_dump(mode="json"),
                                     "client_token": f"tok-{offer['zone']}"})
        assert status == 201
        ids.append(view["id"])
    broken, healthy = ids
    real_notice_of = cloud.notice_of
    # A record whose notice cannot be computed (a notice end past year 9999), as an older state
    # file or a market edited under a running cloud could leave.
    monkeypatch.setattr(cloud, "notice_of", lambda rec: Notice("azure", 1.0e12)
                        if rec.id == broken else real_notice_of(rec))
    monkeypatch.setattr(cloud, "unavailable_reason", lambda offer: "capacity gone")
    cloud.clock_for_test["now"] = START + timedelta(seconds=5)  # type: ignore[attr-defined]
    cloud.tick()
    cloud.tick()
    instances = cloud.store.data.instances
    assert instances[healthy].notice is not None
    assert instances[healthy].notice.action_at == START + timedelta(seconds=35)
    assert instances[broken].notice is None
    cloud.clock_for_test["now"] = START + timedelta(seconds=40)  # type: ignore[attr-defined]
    cloud.tick()
    assert cloud.view(instances[healthy])["state"] in ("terminated", "shutting-down")

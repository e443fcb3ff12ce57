"""Vast's failures mapped onto providers/errors.py through the real SDK, and the API key kept
out of every log line and error message."""

from __future__ import annotations

import logging

import pytest

from core.models import TAG_JOB, Market
from providers.base import LaunchRequest
from providers.errors import AuthError, ProviderError, QuotaError, TransientError
from providers.vastai import VastProvider, VastSettings
from tests.contract.providers.vastai.conftest import TEST_API_KEY
from tests.contract.providers.vastai.data import ask, needs_examples

pytestmark = needs_examples


@pytest.mark.parametrize(("status", "body", "error"), [
    (401, {"success": False, "error": "invalid_user_key", "msg": "bad key"}, AuthError),
    (403, {"success": False, "error": "forbidden", "msg": "no permission"}, AuthError),
    (429, {"detail": "API requests too frequent endpoint threshold=2.0"}, TransientError),
    (503, {"detail": "Service Unavailable"}, TransientError),
    (500, {}, TransientError),
])
def test_search_failures(fake_vast_factory, make_provider, status, body, error) -> None:
    fake = fake_vast_factory([ask()])
    fake.fail("/api/v0/bundles/", status, body)
    with pytest.raises(error, match=f"HTTP {status}"):
        make_provider(fake).list_offers()


def test_insufficient_credit_is_a_quota_error(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()], credit=0.0)
    provider = make_provider(fake)
    offer = next(o for o in provider.list_offers() if o.market is Market.SPOT)
    with pytest.raises(QuotaError, match="insufficient credit"):
        provider.launch(LaunchRequest(offer=offer, client_token="job-1-1", tags={TAG_JOB: "j"}))


def test_a_refused_create_names_vasts_error(fake_vast_factory, make_provider) -> None:
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    offer = next(o for o in provider.list_offers() if o.market is Market.SPOT)
    fake.fail("/api/v0/asks/", 400, {"success": False, "error": "invalid_args",
                                     "msg": "image not found", "ask_id": 11684738})
    with pytest.raises(ProviderError, match="invalid_args: image not found") as raised:
        provider.launch(LaunchRequest(offer=offer, client_token="job-1-1"))
    assert type(raised.value) is ProviderError and raised.value.code == "invalid_args"


def test_an_unreachable_api_is_transient(vast_env) -> None:
    provider = VastProvider(VastSettings(server_url="http://127.0.0.1:9", retries=1,
                                         timeout_s=2))
    with pytest.raises(TransientError, match="ConnectionError"):
        provider.list_offers()


def test_no_key_anywhere_is_an_auth_error_and_a_failed_check(vast_env, monkeypatch,
                                                             fake_vast_factory) -> None:
    monkeypatch.delenv("VAST_API_KEY")
    fake = fake_vast_factory([ask()])
    provider = VastProvider(VastSettings(server_url=fake.url, retries=1))
    with pytest.raises(AuthError, match="VAST_API_KEY"):
        provider.list_offers()
    rows = provider.check()
    assert not rows[0].ok and "VAST_API_KEY" in rows[0].detail
    assert fake.requests == []  # nothing sent without a key


def test_the_key_file_of_the_cli_is_used(vast_env, monkeypatch, tmp_path,
                                         fake_vast_factory) -> None:
    monkeypatch.delenv("VAST_API_KEY")
    key_file = tmp_path / "xdg" / "vastai" / "vast_api_key"
    key_file.parent.mkdir(parents=True)
    key_file.write_text(TEST_API_KEY + "\n")
    fake = fake_vast_factory([ask()])
    provider = VastProvider(VastSettings(server_url=fake.url, retries=1))
    assert provider.list_offers()
    assert provider.check()[0].detail == "found via the vastai CLI's key file"


def test_the_key_is_never_logged_nor_in_an_error(fake_vast_factory, make_provider,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake = fake_vast_factory([ask()])
    provider = make_provider(fake)
    offer = next(o for o in provider.list_offers() if o.market is Market.SPOT)
    provider.launch(LaunchRequest(offer=offer, client_token="job-1-1"))
    provider.describe()
    # A server that echoes the request's key in its message.
    fake.fail("/api/v0/bundles/", 400, {"success": False, "error": "bad",
                                        "msg": f"key {TEST_API_KEY} is not allowed here"})
    with pytest.raises(ProviderError) as raised:
        provider.list_offers()
    assert TEST_API_KEY not in str(raised.value) and "***" in str(raised.value)
    logging.getLogger("urllib3").debug("sent header Bearer %s", TEST_API_KEY)
    assert caplog.records and TEST_API_KEY not in caplog.text
    assert all(TEST_API_KEY not in str(r.check) + r.detail for r in provider.check())


def test_the_observed_resources_unavailable_body_is_no_capacity() -> None:
    from providers.errors import CapacityError
    from providers.vastai.client import error_for
    from tests.contract.providers.vastai.data import example

    body = example("instance_start_resources_unavailable_observed.json")  # an HTTP 200
    error = error_for(200, body["error"], body["msg"], "start")
    assert isinstance(error, CapacityError) and "state change queued" in str(error)

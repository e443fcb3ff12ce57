"""No credential and no agent secret reaches a log record, even with every logger at DEBUG
(azure-core's HTTP logging, urllib3, httpx), on success and on a refused launch."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

import pytest

from core.models import Market
from providers.azure import AzureProvider
from providers.base import LaunchRequest
from providers.errors import ProviderError
from tests.contract.providers.azure.conftest import TEST_TOKEN
from tests.contract.providers.azure.fake_azure import FakeAzure

AGENT_SECRET = "agent-secret-do-not-log-42"


def test_no_secret_in_logs(fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider],
                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("azure.core.pipeline.policies.http_logging_policy", "azure.identity"):
        caplog.set_level(logging.DEBUG, logger=name)  # a level set by the user is kept
    provider = make_provider(fake_azure)
    offer = next(o for o in provider.list_offers() if o.market is Market.SPOT)
    request = LaunchRequest(offer=offer, client_token="job-s-1",
                            agent_env={"GA_AGENT_TOKEN": AGENT_SECRET})
    instance = provider.launch(request)
    provider.describe()
    provider.check()
    fake_azure.fail("PUT", "InvalidParameter", status=400, message="bad customData")
    with pytest.raises(ProviderError):
        provider.launch(request.model_copy(update={"client_token": "job-s-2"}))
    provider.terminate(instance.id)
    custom_data = next(r.body for r in fake_azure.requests
                       if r.method == "PUT")["properties"]["osProfile"]["customData"]
    assert base64.b64decode(custom_data)  # what must not leak is really there
    text = "\n".join(f"{r.name} {r.getMessage()}" for r in caplog.records)
    assert caplog.records  # the SDK logged its requests
    for secret in (TEST_TOKEN, AGENT_SECRET, custom_data[:40]):
        assert secret not in text


def test_sdk_request_dumps_are_quiet_unless_asked_for(fake_azure: FakeAzure,
                                                      make_provider: Callable[..., AzureProvider],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    http_log = logging.getLogger("azure.core.pipeline.policies.http_logging_policy")
    saved = http_log.level
    http_log.setLevel(logging.NOTSET)
    try:
        caplog.set_level(logging.INFO)
        make_provider(fake_azure).list_offers()
        assert not [r for r in caplog.records if r.name == http_log.name]
    finally:
        http_log.setLevel(saved)

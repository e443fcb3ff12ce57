"""Every documented Azure error code reaches the right class of providers.errors, through the
SDK's exceptions: each one answered by the fake Resource Manager to a create."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from core.models import Market
from providers.azure import AzureProvider
from providers.azure.errors import INVALID_LAUNCH, classify
from providers.base import LaunchRequest
from providers.errors import (
    AuthError,
    CapacityError,
    ProviderError,
    QuotaError,
    TransientError,
)
from tests.contract.providers.azure.conftest import StaticToken
from tests.contract.providers.azure.data import example
from tests.contract.providers.azure.fake_azure import FakeAzure

SPOT_CODES = {row["code"]: row["message"] for row in example("compute_spot_error_codes_docs.json")}
EXPECTED = {
    "SkuNotAvailable": CapacityError,
    "SpotPriceGreaterThanProvidedMaxPrice": CapacityError,
    "AzureSpotIsNotSupportedForThisVMSize": CapacityError,
    "AzureSpotFeatureNotEnabledForSubscription": QuotaError,
}


def _launch(provider: AzureProvider) -> None:
    offer = next(o for o in provider.list_offers() if o.market is Market.SPOT)
    provider.launch(LaunchRequest(offer=offer, client_token="job-e-1"))


def _raised(provider: AzureProvider) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        _launch(provider)
    return info.value


@pytest.mark.parametrize("code", sorted(SPOT_CODES))
def test_each_documented_spot_error_code(code: str, fake_azure: FakeAzure,
                                         make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    fake_azure.fail("PUT", code, status=400 if code not in EXPECTED else 409,
                    message=SPOT_CODES[code])
    error = _raised(provider)
    expected = EXPECTED.get(code, ProviderError)
    assert type(error) is expected, code
    assert error.code == (code if expected is not ProviderError else INVALID_LAUNCH)
    assert code in str(error)


@pytest.mark.parametrize("key", sorted(example("compute_errors_capacity_observed.json")))
def test_observed_capacity_failures_are_capacity_errors(key: str) -> None:
    observed = example("compute_errors_capacity_observed.json")[key]
    error = observed.get("error", observed)  # an operation body, or a bare detail object
    cls, code, _ = classify(error, 200)
    assert cls is CapacityError and code in key


def test_observed_allocation_failure_through_the_sdk(
        fake_azure: FakeAzure, make_provider: Callable[..., AzureProvider]) -> None:
    body = example("compute_errors_capacity_observed.json")[
        "AllocationFailed__azure-cli_issue_2401"]["error"]
    fake_azure.fail("PUT", body["code"], status=409, message=body["message"],
                    details=body["details"])
    error = _raised(make_provider(fake_azure))
    assert isinstance(error, CapacityError) and error.code == "AllocationFailed"


@pytest.mark.parametrize("code", ["ZonalAllocationFailed", "OverconstrainedAllocationRequest"])
def test_allocation_codes_at_the_top_level(code: str, fake_azure: FakeAzure,
                                           make_provider: Callable[..., AzureProvider]) -> None:
    # the docs' message for both: "Allocation failed. We do not have sufficient capacity…"
    fake_azure.fail("PUT", code, status=409, message="Allocation failed. We do not have "
                    "sufficient capacity for the requested VM size in this region.")
    error = _raised(make_provider(fake_azure))
    assert isinstance(error, CapacityError) and error.code == code


@pytest.mark.parametrize("key", ["capacity_restriction_409", "spot_tier_no_capacity_docs_message"])
def test_sku_not_available_bodies(key: str, fake_azure: FakeAzure,
                                  make_provider: Callable[..., AzureProvider]) -> None:
    error = example("compute_error_skunotavailable_assembled.json")[key]["error"]
    fake_azure.fail("PUT", error["code"], status=409, message=error["message"])
    assert isinstance(_raised(make_provider(fake_azure)), CapacityError)


@pytest.mark.parametrize("code, message, status, expected", [
    ("OperationNotAllowed", ("Operation could not be completed as it results in exceeding "
     "approved Total Regional Cores quota."), 409, QuotaError),
    ("OperationNotAllowed", ("Operation 'performMaintenance' is not allowed on VM 'x' since the "
     "Subscription of this VM is not eligible."), 409, ProviderError),
    ("AuthorizationFailed", "The client does not have authorization.", 403, AuthError),
    ("TooManyRequests", "throttled", 429, TransientError),
    ("InternalServerError", "boom", 500, TransientError),
    ("SomethingNew", "odd", 502, TransientError),
])
def test_quota_auth_and_transient(code: str, message: str, status: int, expected: type,
                                  fake_azure: FakeAzure,
                                  make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure)
    fake_azure.fail("PUT", code, status=status, message=message, times=2)  # retries too
    assert type(_raised(provider)) is expected


def test_a_wrong_token_is_an_auth_error(fake_azure: FakeAzure,
                                        make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure, credential=StaticToken("stale-token"))
    with pytest.raises(AuthError, match="InvalidAuthenticationToken"):
        provider.list_offers()
    rows = {r.check: r for r in provider.check()}
    assert not rows["Microsoft.Compute/skus"].ok and "AuthError" in rows[
        "Microsoft.Compute/skus"].detail
    assert rows["retail prices"].ok  # no credentials there


def test_an_unreachable_endpoint_is_transient(make_provider: Callable[..., AzureProvider],
                                              fake_azure: FakeAzure) -> None:
    provider = make_provider(fake_azure)
    fake_azure.stop()
    with pytest.raises(TransientError):
        provider.list_offers()

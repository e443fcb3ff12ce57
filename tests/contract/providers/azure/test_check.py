"""``schedctl providers check`` rows of the Azure adapter: one per location and call."""

from __future__ import annotations

from collections.abc import Callable

from providers.azure import AzureProvider
from tests.contract.providers.azure.fake_azure import FakeAzure


def test_rows_per_location(fake_azure: FakeAzure,
                           make_provider: Callable[..., AzureProvider]) -> None:
    provider = make_provider(fake_azure, locations=["eastus", "westus"], launch=None)
    rows = provider.check()
    assert [(r.region, r.check, r.ok) for r in rows] == [
        ("-", "credentials", True),
        ("eastus", "Microsoft.Compute/skus", True), ("eastus", "retail prices", True),
        ("westus", "Microsoft.Compute/skus", True), ("westus", "retail prices", True),
        ("-", "virtualMachines in gpu-arbiter-test", True)]
    assert rows[0].detail == "found via StaticToken"
    fake_azure.fail("GET", "AuthorizationFailed", status=403, times=4)
    failed = provider.check()
    assert not failed[1].ok and "AuthError" in failed[1].detail

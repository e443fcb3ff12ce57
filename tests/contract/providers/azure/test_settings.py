"""The strict ``kind: azure`` entry: Azure's names for its fields, the launch section's
rules, the subscription from the environment, credentials refused without being echoed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from providers.azure import AzureProvider, AzureSettings
from providers.azure.setup import CREDENTIALS_COME_FROM, from_config
from scheduler.provider_setup import ProviderConfigError, build_providers
from tests.contract.providers.azure.conftest import launch_section
from tests.contract.providers.azure.data import SUBSCRIPTION


def _entry(**values: Any) -> dict[str, Any]:
    return {"kind": "azure", "subscription_id": SUBSCRIPTION, "locations": ["eastus"],
            "resource_group": "rg", **values}


def test_an_entry_builds_an_adapter_without_a_request(tmp_path: Path) -> None:
    provider = from_config(_entry(vm_sizes=["Standard_NC*"], launch=launch_section()),
                           tmp_path, tmp_path)
    try:
        assert isinstance(provider, AzureProvider) and provider.regions == ["eastus"]
        assert provider.settings.wants_type("Standard_NC4as_T4_v3")
        assert not provider.settings.wants_type("standard_nc4as_t4_v3")
        assert provider.client.scope == "https://management.azure.com/.default"
    finally:
        provider.close()


def test_subscription_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    entry = _entry()
    del entry["subscription_id"]
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    with pytest.raises(ValidationError, match="AZURE_SUBSCRIPTION_ID"):
        from_config(entry, tmp_path, tmp_path)
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
    provider = from_config(entry, tmp_path, tmp_path)
    assert provider.settings.subscription_id == SUBSCRIPTION
    provider.close()


@pytest.mark.parametrize("values, field", [
    ({"regions": ["eastus"]}, "regions"),
    ({"locations": ["East US"]}, "locations"),
    ({"vm_sizes": ["Standard NC"]}, "vm_sizes"),
    ({"subscription_id": "not-a-uuid"}, "subscription_id"),
    ({"endpoint_url": "http://management.azure.com"}, "endpoint_url"),
    ({"launch": launch_section(), "resource_group": None}, "resource_group"),
    ({"launch": launch_section(subnets={"westus": launch_section()["subnets"]["eastus"]})},
     "subnets"),
    ({"launch": launch_section(image="ubuntu-latest")}, "image"),
    ({"launch": launch_section(ssh_public_key="AAAA")}, "ssh_public_key"),
    ({"launch": launch_section(admin_username="root")}, "admin_username"),
    ({"launch": launch_section(max_price="cheap")}, "max_price"),
    ({"launch": launch_section(os_disk_size_gib=10)}, "os_disk_size_gib"),
])
def test_bad_entries_name_the_field(values: dict[str, Any], field: str) -> None:
    entry = _entry(**values)
    entry.pop("kind")
    with pytest.raises(ValidationError, match=field):
        AzureSettings.model_validate(entry)


def test_credentials_in_the_file_are_refused_unechoed(tmp_path: Path) -> None:
    entry = _entry(client_secret="hunter2-very-secret")
    with pytest.raises(ProviderConfigError) as info:
        build_providers([entry], tmp_path, tmp_path)
    assert "hunter2" not in str(info.value) and "client_secret" in str(info.value)
    assert CREDENTIALS_COME_FROM in str(info.value)
    assert "DefaultAzureCredential" in CREDENTIALS_COME_FROM


def test_a_full_entry_passes_the_credential_screen(tmp_path: Path) -> None:
    (provider,) = build_providers([_entry(launch=launch_section())], tmp_path, tmp_path)
    assert isinstance(provider, AzureProvider)  # ssh_public_key is not taken for a secret
    provider.close()

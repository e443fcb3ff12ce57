import pytest

from core.config import examples_dir
from scheduler.daemon_config import load_config_file
from scheduler.provider_setup import ProviderConfigError, build_providers


def test_unknown_kind_and_bad_fields_are_named(tmp_path):
    with pytest.raises(ProviderConfigError, match=r"providers\[0\].kind: got 'awz'; allowed: .*replay"):
        build_providers([{"kind": "awz"}], tmp_path, tmp_path)
    with pytest.raises(ProviderConfigError, match=r"providers\[0\] \(replay\): markt: .*unknown field"):
        build_providers([{"kind": "replay", "market": "m.yaml", "markt": 1}], tmp_path, tmp_path)
    with pytest.raises(ProviderConfigError, match="is not a file"):
        build_providers([{"kind": "replay", "market": "missing.yaml"}], tmp_path, tmp_path)


def test_config_file_paths_are_relative_to_the_file(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"providers:\n  - kind: replay\n    market: {examples_dir() / 'market.yaml'}\n")
    entries = load_config_file(config)
    (provider,) = build_providers(entries, config.parent, tmp_path)
    assert provider.provider_names == {"aws", "gcp"}


def test_replay_paths_may_use_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("GA_TEST_MARKETS", str(examples_dir()))
    monkeypatch.setenv("GA_TEST_STATE", str(tmp_path / "shared"))
    entries = [{"kind": "replay", "market": "${GA_TEST_MARKETS}/market.yaml",
                "state_dir": "$GA_TEST_STATE/replay"}]
    (provider,) = build_providers(entries, tmp_path, tmp_path)
    assert provider.provider_names == {"aws", "gcp"}
    assert provider.state_dir == (tmp_path / "shared" / "replay").resolve()
    with pytest.raises(ProviderConfigError, match=r"\$\{GA_TEST_UNSET\}/market.yaml is not a file"):
        build_providers([{"kind": "replay", "market": "${GA_TEST_UNSET}/market.yaml"}],
                        tmp_path, tmp_path)


@pytest.mark.parametrize("entry, field", [
    ({"kind": "replay", "market": "m.yaml", "api_token": "supersecretvalue123"}, "api_token"),
    ({"kind": "catalog", "catalogs": [{"provider": "lambda", "path": "vms.csv",
                                       "secret_key": "supersecretvalue123"}]},
     "catalogs[0].secret_key"),
    ({"kind": "aws", "regions": ["us-east-1"], "launch": {"password": "supersecretvalue123"}},
     "launch.password"),
])
def test_no_kind_echoes_a_credential_like_field(tmp_path, entry, field):
    """Every kind refuses credential-like fields, at any depth (lists too), by name only."""
    with pytest.raises(ProviderConfigError, match="credentials do not belong") as caught:
        build_providers([entry], tmp_path, tmp_path)
    text = str(caught.value)
    assert f"providers[0] ({entry['kind']}): {field}" in text
    assert "supersecretvalue123" not in text


@pytest.mark.parametrize("entry, field", [
    ({"kind": "azure", "subscription_id": "00000000-0000-0000-0000-000000000000",
      "locations": ["eastus"], "launch": {"admin_pass": "SUPERSECRET123"}}, "admin_pass"),
    ({"kind": "gcp", "project": "my-project-1", "regions": ["us-central1"],
      "service_account_json": '{"type": "service_account", "private_key_id": "SUPERSECRET123"}'},
     "service_account_json"),
])
def test_an_unknown_fields_value_is_never_echoed(entry, field, tmp_path):
    with pytest.raises(ProviderConfigError) as raised:
        build_providers([entry], tmp_path, tmp_path)
    assert field in str(raised.value) and "SUPERSECRET123" not in str(raised.value)


def test_a_private_key_pasted_into_a_known_field_is_not_echoed(tmp_path):
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUSUPERSECRET123\n"
    entry = {"kind": "fleet", "hosts": [{"name": "box1", "address": "127.0.0.1", "user": "me",
                                         "labels": {"site": key},
                                         "gpus": [{"model": "RTX4090", "count": 1,
                                                   "vram_gib": 24}]}]}
    with pytest.raises(ProviderConfigError) as raised:
        build_providers([entry], tmp_path, tmp_path)
    assert "labels" in str(raised.value) and "b3BlbnNz" not in str(raised.value)

import pytest

from core.config import examples_dir
from scheduler.provider_setup import (
    ProviderConfigError,
    build_providers,
    load_config_file,
)


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


def test_bad_config_files(tmp_path):
    path = tmp_path / "c.yaml"
    for text, message in (("providers: []\n", "non-empty"), ("x: 1\nproviders: [{kind: replay}]\n",
                                                             "unknown top-level"),
                          ("providers: [\n", "not valid YAML")):
        path.write_text(text)
        with pytest.raises(ProviderConfigError, match=message):
            load_config_file(path)


def test_budgets_in_the_config_file(tmp_path):
    from scheduler.provider_setup import load_budget_config
    path = tmp_path / "config.yaml"
    path.write_text("providers: [{kind: replay, market: m.yaml}]\n"
                    "budgets: {alice: 100, bob: 12.5}\nbudget_webhook: http://127.0.0.1:8/h\n")
    assert load_config_file(path) == [{"kind": "replay", "market": "m.yaml"}]
    config = load_budget_config(path, env={})
    assert config.budgets == {"alice": 100.0, "bob": 12.5}
    assert config.budget_webhook == "http://127.0.0.1:8/h"
    env = {"GA_BUDGET_WEBHOOK_URL": "https://hooks.example.com/x"}
    assert load_budget_config(path, env=env).budget_webhook == "https://hooks.example.com/x"
    assert load_budget_config(None, env={}).budgets == {}
    assert load_budget_config(tmp_path / "absent.yaml", env=env).budgets == {}


@pytest.mark.parametrize("text, message", [
    ("budgets: {alice: 0}\n", "positive"),
    ("budgets: {Alice: 5}\n", "owners are"),
    ("budgets: {alice: lots}\n", "budgets.alice"),
    ("budgets: [1]\n", "budgets"),
    ("budget_webhook: ftp://x\n", "http"),
    ("budget: {alice: 1}\n", "unknown top-level"),
])
def test_bad_budget_config_is_refused_at_start(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text("providers: [{kind: replay, market: m.yaml}]\n" + text)
    with pytest.raises(ProviderConfigError, match=message):
        load_config_file(path)


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

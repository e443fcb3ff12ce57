"""The daemon config file (scheduler/daemon_config.py): its top-level fields, budgets and
webhook; its provider entries are built by scheduler/provider_setup.py."""

import pytest

from scheduler.daemon_config import ConfigError, load_budget_config, load_config_file


def test_bad_config_files(tmp_path):
    path = tmp_path / "c.yaml"
    for text, message in (("providers: []\n", "non-empty"), ("x: 1\nproviders: [{kind: replay}]\n",
                                                             "unknown top-level"),
                          ("providers: [\n", "not valid YAML")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config_file(path)


def test_budgets_in_the_config_file(tmp_path):
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
    with pytest.raises(ConfigError, match=message):
        load_config_file(path)

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


def test_a_bad_webhook_url_from_the_environment_is_named_as_such(tmp_path):
    env = {"GA_BUDGET_WEBHOOK_URL": "ftp://x"}
    for path in (None, tmp_path / "absent.yaml"):
        with pytest.raises(ConfigError, match=r"^GA_BUDGET_WEBHOOK_URL: budget_webhook"):
            load_budget_config(path, env=env)
    present = tmp_path / "config.yaml"
    present.write_text("budgets: {alice: 5}\n")
    with pytest.raises(ConfigError, match=r"^GA_BUDGET_WEBHOOK_URL: "):
        load_budget_config(present, env=env)


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf"])
def test_agent_lost_after_must_be_a_positive_number(value):
    from scheduler.daemon import _agent_lost_after_s

    with pytest.raises(ConfigError, match=r"GA_AGENT_LOST_AFTER_S: got .*positive number"):
        _agent_lost_after_s({"GA_AGENT_LOST_AFTER_S": value})
    assert _agent_lost_after_s({"GA_AGENT_LOST_AFTER_S": "2.5"}) == 2.5
    assert _agent_lost_after_s({}) == 60.0


@pytest.mark.parametrize("env", [{"GA_BUDGET_WEBHOOK_URL": "ftp://x"},
                                 {"GA_AGENT_LOST_AFTER_S": "abc"}])
def test_the_daemon_refuses_a_bad_setting_before_starting_anything(tmp_path, env, monkeypatch):
    from typer.testing import CliRunner

    from scheduler.cli.main import app

    home = tmp_path / "home"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["daemon", "--home", str(home)])
    assert result.exit_code == 2, result.output
    assert next(iter(env)) in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (home / "redis").exists()  # no embedded Redis was started

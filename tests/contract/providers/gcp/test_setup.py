"""``kind: gcp`` through :mod:`scheduler.provider_setup`: the strict settings model, refused
fields, Application Default Credentials (a service-account key file named by
``GOOGLE_APPLICATION_CREDENTIALS``, its signature checked by the fake), and no credential or
agent secret in any log record at DEBUG."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from core.models import TAG_OWNER
from providers.base import LaunchRequest
from providers.errors import AuthError
from providers.gcp import GcpProvider, GcpSettings
from scheduler.provider_setup import ProviderConfigError, build_providers
from tests.contract.providers.gcp.data import PROJECT
from tests.contract.providers.gcp.fake_gcp import FakeGcp

SA_EMAIL = f"gpu-arbiter@{PROJECT}.iam.gserviceaccount.com"
AGENT_SECRET = "agent-token-0123456789abcdef"


def _entry(fake: FakeGcp, **extra: object) -> dict:
    return {"kind": "gcp", "project": PROJECT, "regions": ["us-central1"],
            "api_endpoint": fake.url, "billing_api_endpoint": fake.url, **extra}


def _build(entry: dict, tmp_path: Path) -> GcpProvider:
    [provider] = build_providers([entry], tmp_path, tmp_path)
    assert isinstance(provider, GcpProvider)
    return provider


def test_settings_are_strict_and_name_the_field() -> None:
    ok = GcpSettings(project="my-project", regions=["us-central1"], zones=["us-central1-a"],
                     accelerators=["nvidia-tesla-*"], launch={})
    assert ok.launch.termination_action == "DELETE" and ok.launch.disk_gib == 100
    assert ok.wants_accelerator("nvidia-tesla-t4") and not ok.wants_accelerator("nvidia-l4")
    for bad, match in (
        ({"zones": ["europe-west4-a"]}, "not zones of the configured regions"),
        ({"regions": ["us-central1a"]}, "region names"),
        ({"project": "My_Project"}, "project id"),
        ({"accelerators": ["NVIDIA L4"]}, "accelerator-type patterns"),
        ({"endpoint_url": "http://x"}, "api_endpoint"),
        ({"history_lookback_h": 24}, "no spot price history"),
        ({"api_endpoint": "http://x/path"}, "without a path"),
        ({"launch": {"termination_action": "HIBERNATE"}}, "STOP"),
        ({"launch": {"image": "debian-12"}}, "image path"),
        ({"launch": {"subnetworks": {"europe-west4": "x"}}}, "not configured"),
        ({"launch": {"service_account": "nobody"}}, "e-mail"),
        ({"launch": {"disk_gib": 5}}, "greater than or equal to 10"),
        ({"launch": {"ssh_keys": "x"}}, "Extra inputs"),
    ):
        values = {"project": "my-project", "regions": ["us-central1"], **bad}
        with pytest.raises(ValueError, match=match):
            GcpSettings(**values)


def test_credentials_in_the_entry_are_refused_without_their_value(tmp_path: Path) -> None:
    entry = {"kind": "gcp", "project": PROJECT, "regions": ["us-central1"],
             "service_account_key": {"private_key": "-----BEGIN PRIVATE KEY----- abc"}}
    with pytest.raises(ProviderConfigError) as caught:
        build_providers([entry], tmp_path, tmp_path)
    text = str(caught.value)
    assert "Application Default Credentials" in text and "BEGIN PRIVATE KEY" not in text


def test_a_config_error_names_the_entry_and_field(tmp_path: Path) -> None:
    with pytest.raises(ProviderConfigError, match=r"providers\[0\] \(gcp\).*project"):
        build_providers([{"kind": "gcp", "regions": ["us-central1"]}], tmp_path, tmp_path)


def test_without_credentials_calls_are_auth_errors(fake: FakeGcp, tmp_path: Path) -> None:
    provider = _build(_entry(fake), tmp_path)  # GOOGLE_APPLICATION_CREDENTIALS: a missing file
    try:
        with pytest.raises(AuthError, match="credentials"):
            provider.list_offers()
        rows = provider.check()
        assert (rows[0].check, rows[0].ok) == ("credentials", False)
        assert "GOOGLE_APPLICATION_CREDENTIALS" in rows[0].detail
    finally:
        provider.close()


def test_adc_file_reaches_the_fake_and_no_secret_is_ever_logged(
        fake: FakeGcp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
    fake.service_accounts[SA_EMAIL] = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    adc = tmp_path / "key.json"
    adc.write_text(json.dumps({"type": "service_account", "project_id": PROJECT,
                               "private_key_id": "k1", "private_key": private_pem,
                               "client_email": SA_EMAIL, "client_id": "1",
                               "token_uri": f"{fake.url}/token"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    key_body = private_pem.splitlines()[5]
    caplog.set_level(logging.DEBUG)
    # The SDKs log on "google.*", which google-api-core keeps from propagating to the root
    # logger; a handler there sees what a user's GOOGLE_SDK_PYTHON_LOGGING_SCOPE would print.
    sdk_records: list[logging.LogRecord] = []
    sdk_handler = logging.Handler(logging.DEBUG)
    sdk_handler.emit = sdk_records.append  # type: ignore[method-assign]
    logging.getLogger("google").addHandler(sdk_handler)
    provider = _build(_entry(fake, launch={}), tmp_path)
    try:
        offers = provider.list_offers()
        offer = next(o for o in offers if o.instance_type == "g2-standard-4")
        instance = provider.launch(LaunchRequest(
            offer=offer, client_token="job-9-1", tags={TAG_OWNER: "ga-test"},
            agent_env={"GA_AGENT_TOKEN": AGENT_SECRET}))
        assert [i.id for i in provider.describe({TAG_OWNER: "ga-test"})] == [instance.id]
        fake.fail_next("GET", "/instances", 403, reason="forbidden")
        with pytest.raises(AuthError, match="forbidden"):
            provider.describe({TAG_OWNER: "ga-test"})
        rows = provider.check()
        assert rows[0].ok and "GOOGLE_APPLICATION_CREDENTIALS" in rows[0].detail
        provider.terminate(instance.id)
    finally:
        provider.close()
        logging.getLogger("google").removeHandler(sdk_handler)
    records = caplog.records + sdk_records
    assert any("Created client" in r.getMessage() for r in sdk_records)
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in records)
    assert "httpRequest" not in logged and "httpResponse" not in logged
    for secret in (key_body, AGENT_SECRET, *fake.tokens):
        assert secret not in logged, secret
    assert "".join(r.detail for r in rows).count("secret") == 0

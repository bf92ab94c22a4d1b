"""Standard Webhooks secrets: whsec_ + base64 of 24 to 64 bytes; several for rotation."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
import standardwebhooks

from agentd.engine.webhooks import signer_for
from agentd.errors import ConfigError
from agentd.settings import WebhookConfig


def _secret(n: int) -> str:
    return "whsec_" + base64.b64encode(bytes(range(n))).decode()


def _config() -> WebhookConfig:
    return WebhookConfig(url="http://127.0.0.1:9/h", events=["*"], secret_env="HOOK_SECRET")


def test_the_default_timeout_is_what_the_spec_recommends() -> None:
    assert 15 <= _config().timeout <= 30


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (None, "is not set"),
        ("   ", "is not set"),
        (base64.b64encode(bytes(32)).decode(), "does not start with whsec_"),
        ("WHSEC_" + base64.b64encode(bytes(32)).decode(), "does not start with whsec_"),
        (_secret(23), "decodes to 23 bytes"),
        (_secret(65), "decodes to 65 bytes"),
        ("whsec_", "decodes to 0 bytes"),
        ("whsec_abc$", "not whsec_ followed by base64"),
        (_secret(32)[:-1], "not whsec_ followed by base64"),  # bad padding
        (f"{_secret(32)} {_secret(8)}", "secret 2 of 2"),
    ],
)
def test_a_secret_that_is_not_a_standard_webhooks_secret_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, value: str | None, says: str
) -> None:
    if value is None:
        monkeypatch.delenv("HOOK_SECRET", raising=False)
    else:
        monkeypatch.setenv("HOOK_SECRET", value)
    with pytest.raises(ConfigError, match="HOOK_SECRET") as info:
        signer_for(_config())
    assert says in str(info.value)


@pytest.mark.parametrize("n", [24, 32, 64])
def test_secrets_of_24_to_64_bytes_are_accepted(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setenv("HOOK_SECRET", _secret(n))
    signer_for(_config())


def test_during_a_rotation_each_secret_verifies_with_the_official_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    new, old = _secret(32), _secret(24)
    monkeypatch.setenv("HOOK_SECRET", f"{new}  {old}\n")
    signers = signer_for(_config())
    now = datetime.now(UTC)
    body = '{"type":"loop.failed"}'
    signature = signers.sign("msg_1", now, body)
    assert len(signature.split(" ")) == 2 and all(s.startswith("v1,") for s in signature.split(" "))
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    for secret in (new, old):  # a receiver on either side of the rotation
        assert standardwebhooks.Webhook(secret).verify(body, headers) == {"type": "loop.failed"}
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(_secret(40)).verify(body, headers)


def test_each_secret_of_a_rotation_is_a_known_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentd import known_secrets
    from agentd.settings import Settings

    new, old = _secret(32), _secret(24)
    monkeypatch.setenv("HOOK_SECRET", f"{new} {old}")
    found = known_secrets.configured(Settings(webhooks=[_config()]))
    for secret in (new, old):
        assert secret in found and secret.removeprefix("whsec_") in found

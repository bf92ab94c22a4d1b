"""A model endpoint that fails names itself (origin and path, no secrets) in the error, and
a base_url ending in the dialect's version segment is refused before anything is sent.

Caught: a dead model URL failed the loop with "connect failed: ConnectError(...)", and a
base_url of `https://host/v1` silently became `https://host/v1/v1/chat/completions`.
"""

from __future__ import annotations

import socket

import pytest

from agentd.errors import ConfigError, LLMStatusError, LLMTransportError
from agentd.llm.client import LLMClient
from agentd.llm.types import LLMRequest, Message, Provider
from agentd.testing.fake_llm import FakeLLM, Reply, Rule

PATHS = {
    "open_ai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/m-1:generateContent",
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(base_url: str) -> LLMRequest:
    return LLMRequest(
        provider=Provider(base_url=base_url, model="m-1", api_token="sk-secret-token-123456"),
        messages=[Message("user", "hi")],
    )


@pytest.mark.parametrize("dialect", list(PATHS))
async def test_an_unreachable_endpoint_is_named_in_the_error(
    client: LLMClient, dialect: str
) -> None:
    port = _closed_port()
    base = f"http://user:hunter2@127.0.0.1:{port}/gw?key=sk-secret-token-123456"
    with pytest.raises(LLMTransportError) as info:
        await client.complete(_request(base), dialect=dialect)
    message = info.value.message
    assert f"http://127.0.0.1:{port}/gw{PATHS[dialect]}" in message
    assert not info.value.connected
    for secret in ("hunter2", "user:", "sk-secret-token-123456", "key="):
        assert secret not in message


@pytest.mark.parametrize("dialect", list(PATHS))
async def test_an_error_status_names_the_endpoint(
    client: LLMClient, fake: FakeLLM, dialect: str
) -> None:
    fake.add(Rule(reply=Reply(status=404, error_body={"error": "no such route"})))
    with pytest.raises(LLMStatusError) as info:
        await client.complete(_request(fake.base_url), dialect=dialect)
    assert info.value.status_code == 404
    assert f"{fake.base_url}{PATHS[dialect]} answered HTTP 404" in info.value.message


@pytest.mark.parametrize(
    ("dialect", "suffix"),
    [("open_ai", "/v1"), ("open_ai", "/v1/"), ("anthropic", "/V1"), ("gemini", "/v1beta")],
)
async def test_a_base_url_ending_in_the_version_segment_is_refused_before_sending(
    client: LLMClient, fake: FakeLLM, dialect: str, suffix: str
) -> None:
    fake.add(Rule(reply=Reply(content="should not be reached")))
    with pytest.raises(ConfigError) as info:
        await client.complete(_request(fake.base_url + suffix), dialect=dialect)
    assert "drop the trailing" in info.value.message
    assert f"base_url = {fake.base_url} " in info.value.message
    assert fake.requests == []

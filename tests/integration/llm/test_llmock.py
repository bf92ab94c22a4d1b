"""The client against llmock, an independent three-dialect mock (PyPI `llmock`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from agentd.llm.client import LLMClient
from agentd.llm.types import LLMRequest, Message, Provider, ToolSpec

testing = pytest.importorskip("llmock.testing", reason="llmock is not installed")

PREFIX = {"open_ai": "", "anthropic": "/anthropic", "gemini": "/gemini"}


@pytest.fixture(scope="module")
def llmock_url() -> Iterator[str]:
    server = testing.LLMockServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
async def mock(llmock_url: str) -> AsyncIterator[str]:
    async with httpx.AsyncClient(base_url=llmock_url) as http:
        (await http.post("/_llmock/reset")).raise_for_status()
    yield llmock_url


async def script(url: str, *behaviors: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=url) as http:
        r = await http.post("/_llmock/scenario", json={"behaviors": list(behaviors)})
        r.raise_for_status()


def request(url: str, dialect: str, stream: bool, tools: bool = False) -> LLMRequest:
    return LLMRequest(
        provider=Provider(base_url=url + PREFIX[dialect], model="m", api_token="k"),
        messages=[Message("system", "be brief"), Message("user", "What is the weather?")],
        tools=[
            ToolSpec(
                "get_weather",
                "weather",
                {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            ),
            ToolSpec(
                "get_time", "time", {"type": "object", "properties": {"tz": {"type": "string"}}}
            ),
        ]
        if tools
        else [],
        stream=stream,
    )


pytestmark = [
    pytest.mark.parametrize("dialect", ["open_ai", "anthropic", "gemini"]),
    pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"]),
]


async def test_text_exchange(mock: str, dialect: str, stream: bool) -> None:
    await script(mock, {"type": "reply", "text": "Sunny in Paris, all day long."})
    client = LLMClient()
    try:
        r = await client.complete(request(mock, dialect, stream), dialect=dialect)
    finally:
        await client.aclose()
    assert r.content == "Sunny in Paris, all day long."
    assert r.finish_reason == "stop" and r.tool_calls == []


async def test_parallel_tool_call_exchange(mock: str, dialect: str, stream: bool) -> None:
    await script(
        mock,
        {
            "type": "reply",
            "text": "",
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}},
            ],
        },
    )
    client = LLMClient()
    try:
        r = await client.complete(request(mock, dialect, stream, tools=True), dialect=dialect)
    finally:
        await client.aclose()
    assert [(c.name, c.arguments) for c in r.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"tz": "Asia/Tokyo"}),
    ]
    assert r.finish_reason == "tool_calls"

"""FakeLLM itself: rule matching, expiry, request recording, and the process entry point."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx

from agentd.llm.client import LLMClient
from agentd.llm.types import LLMRequest, Message, Provider, ToolCallRequest
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

REPO = Path(__file__).resolve().parents[3]


def convo(*messages: Message, base_url: str) -> LLMRequest:
    return LLMRequest(provider=Provider(base_url=base_url, model="m"), messages=list(messages))


async def test_rules_match_the_last_message_in_order_and_expire(
    client: LLMClient, fake: FakeLLM
) -> None:
    fake.add(
        Rule(
            lambda last: last.role == "tool" and last.tool_name == "lookup",
            Reply(content="from tool"),
        )
    )
    fake.add(Rule("weather", Reply(content="sunny"), times=1))
    call = ToolCallRequest("c1", "lookup", {})
    for dialect in ("open_ai", "anthropic", "gemini"):
        r = await client.complete(
            convo(
                Message("user", "weather?"),
                Message("assistant", "", tool_calls=[call]),
                Message("tool", "42", tool_call_id="c1", name="lookup"),
                base_url=fake.base_url,
            ),
            dialect=dialect,
        )
        assert r.content == "from tool"
    ask = convo(Message("user", "weather in Paris?"), base_url=fake.base_url)
    assert (await client.complete(ask)).content == "sunny"
    assert (await client.complete(ask)).content == "ok"  # expired: the default reply
    assert [r.dialect for r in fake.requests] == [
        "open_ai",
        "anthropic",
        "gemini",
        "open_ai",
        "open_ai",
    ]
    await fake.wait_for_requests(5, timeout=1)


async def test_many_concurrent_streams(client: LLMClient, fake: FakeLLM) -> None:
    fake.add(Rule(reply=Reply(content="concurrent answer", chunk_size=2, chunk_delay=0.01)))
    request = LLMRequest(
        provider=Provider(base_url=fake.base_url, model="m"),
        messages=[Message("user", "hi")],
        stream=True,
    )
    results = await asyncio.gather(*(client.complete(request) for _ in range(200)))
    assert {r.content for r in results} == {"concurrent answer"}


async def test_process_entry_point(tmp_path: Path) -> None:
    rules = [
        {
            "match": {"contains": "weather"},
            "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        },
        {"match": None, "reply": {"content": "scripted", "usage": [1, 2]}, "times": 1},
    ]
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentd.testing.fake_llm",
        "--port",
        "0",
        "--rules",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=10)
        assert line.startswith(b"LISTENING ")
        base = f"http://127.0.0.1:{int(line.split()[1])}"
        client = LLMClient()
        try:
            r = await client.complete(convo(Message("user", "weather?"), base_url=base))
            assert r.tool_calls[0].arguments == {"city": "Oslo"}
            r = await client.complete(convo(Message("user", "hi"), base_url=base))
            assert r.content == "scripted" and r.usage is not None
        finally:
            await client.aclose()
        async with httpx.AsyncClient() as http:
            assert (await http.get(base + "/health")).status_code == 200
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), timeout=10) == 0


def test_tool_call_arguments_may_be_raw_text() -> None:
    assert ToolCall("t", "{raw").arguments == "{raw"

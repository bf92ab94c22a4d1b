"""Every dialect, streaming and not, against FakeLLM: text, tool calls, reasoning."""

from __future__ import annotations

import pytest

from agentd.errors import LLMProtocolError
from agentd.llm.client import LLMClient
from agentd.llm.types import LLMRequest, Message, Provider, StreamDelta, ToolSpec
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

DIALECTS = ["open_ai", "anthropic", "gemini"]
pytestmark = [
    pytest.mark.parametrize("dialect", DIALECTS),
    pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"]),
]


def make_request(fake: FakeLLM, stream: bool, **kw: object) -> LLMRequest:
    return LLMRequest(
        provider=Provider(base_url=fake.base_url, model="m-1", api_token="tok"),
        messages=[Message("system", "sys"), Message("user", "hello there")],
        tools=[ToolSpec("get_weather"), ToolSpec("get_time")],
        stream=stream,
        **kw,  # type: ignore[arg-type]
    )


async def run(client: LLMClient, fake: FakeLLM, dialect: str, stream: bool, **kw: object) -> tuple:
    deltas: list[StreamDelta] = []

    async def on_delta(d: StreamDelta) -> None:
        deltas.append(d)

    response = await client.complete(
        make_request(fake, stream, **kw), dialect=dialect, on_delta=on_delta
    )
    return response, deltas


async def test_text(client: LLMClient, fake: FakeLLM, dialect: str, stream: bool) -> None:
    fake.add(Rule(reply=Reply(content="The quick brown fox jumps.", usage=(7, 5), chunk_size=4)))
    r, deltas = await run(client, fake, dialect, stream)
    assert r.content == "The quick brown fox jumps."
    assert r.finish_reason == "stop" and r.tool_calls == []
    assert r.usage is not None and (r.usage.prompt_tokens, r.usage.completion_tokens) == (7, 5)
    assert len(r.exchanges) == 1 and r.exchanges[0].status == 200
    assert r.duration > 0
    if stream:
        assert "".join(d.content for d in deltas) == r.content and len(deltas) > 1
        assert r.ttft is not None and r.ttft <= r.duration
    else:
        assert deltas == [] and r.ttft is None
    req = fake.requests[0]
    assert req.dialect == dialect and req.stream is stream
    assert "sys" in str(req.json) and "hello there" in str(req.json)


async def test_one_tool_call(client: LLMClient, fake: FakeLLM, dialect: str, stream: bool) -> None:
    fake.add(Rule("hello", Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"})])))
    r, _ = await run(client, fake, dialect, stream)
    assert [(c.name, c.arguments) for c in r.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert r.tool_calls[0].id and r.finish_reason == "tool_calls"


async def test_parallel_tool_calls_and_invalid_arguments(
    client: LLMClient, fake: FakeLLM, dialect: str, stream: bool
) -> None:
    calls = [
        ToolCall("get_weather", {"city": "Paris", "unit": "celsius"}, id="c_1"),
        ToolCall("get_time", {"tz": "Asia/Tokyo"}, id="c_2"),
        ToolCall("get_time", "{not json", id="c_3"),
    ]
    fake.add(Rule(reply=Reply(content="Checking.", tool_calls=calls, chunk_size=3)))
    r, _ = await run(client, fake, dialect, stream)
    assert [c.name for c in r.tool_calls] == ["get_weather", "get_time", "get_time"]
    assert r.tool_calls[0].arguments == {"city": "Paris", "unit": "celsius"}
    assert r.tool_calls[1].arguments == {"tz": "Asia/Tokyo"}
    assert r.tool_calls[2].arguments is None and r.tool_calls[2].raw_arguments == "{not json"
    assert [c.id for c in r.tool_calls] == ["c_1", "c_2", "c_3"]
    assert r.content == "Checking."


async def test_reasoning_is_captured_with_signature(
    client: LLMClient, fake: FakeLLM, dialect: str, stream: bool
) -> None:
    fake.add(
        Rule(
            reply=Reply(
                content="42",
                reasoning="Let me think step by step.",
                tool_calls=[ToolCall("get_time", {}), ToolCall("get_weather", {})],
                signature="SIG-1",
            )
        )
    )
    r, deltas = await run(client, fake, dialect, stream, reasoning_effort="low")
    assert r.reasoning == "Let me think step by step." and r.content == "42"
    if stream:
        assert "".join(d.reasoning for d in deltas) == r.reasoning
    if dialect != "open_ai":
        assert r.metadata["thought_signature"] == "SIG-1"
    if dialect == "gemini":  # only the first of parallel calls is signed
        assert r.tool_calls[0].metadata["thought_signature"] == "SIG-1"
        assert "thought_signature" not in r.tool_calls[1].metadata
    assert r.metadata["reasoning_carried"] == {
        "messages": 0,
        "chars": 0,
        "inline_chars": 0,
        "tokens_est": 0,
    }
    sent = fake.requests[0].json
    if dialect == "open_ai":
        assert sent["reasoning_effort"] == "low"
    elif dialect == "anthropic":
        assert sent["thinking"]["type"] == "enabled"
    else:
        assert "thinkingConfig" in sent["generationConfig"]


async def test_signed_reasoning_round_trips(
    client: LLMClient, fake: FakeLLM, dialect: str, stream: bool
) -> None:
    fake.add(
        Rule(
            reply=Reply(
                content="first",
                reasoning="plan A",
                tool_calls=[ToolCall("get_time", {"tz": "UTC"})],
                signature="SIG-9",
            ),
            times=1,
        )
    )
    r1, _ = await run(client, fake, dialect, stream)
    history = [
        Message("user", "hello there"),
        Message(
            "assistant",
            r1.content,
            reasoning=r1.reasoning,
            tool_calls=r1.tool_calls,
            metadata={k: v for k, v in r1.metadata.items() if k != "reasoning_carried"},
        ),
        Message("tool", "12:00", tool_call_id=r1.tool_calls[0].id, name="get_time"),
    ]
    r2 = await client.complete(
        LLMRequest(
            provider=Provider(base_url=fake.base_url, model="m-1"), messages=history, stream=stream
        ),
        dialect=dialect,
    )
    assert r2.content == "ok"
    carried = r2.metadata["reasoning_carried"]
    assert carried["messages"] == 1 and carried["chars"] == len("plan A")
    sent = str(fake.requests[1].json)
    assert "plan A" in sent
    if dialect != "open_ai":
        assert "SIG-9" in sent


async def test_llm_params_are_deep_merged_last(
    client: LLMClient, fake: FakeLLM, dialect: str, stream: bool
) -> None:
    params = {"temperature": 0.2, "generationConfig": {"topK": 3}, "max_tokens": 77}
    await run(client, fake, dialect, stream, max_tokens=10, llm_params=params)
    sent = fake.requests[0].json
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 77
    if dialect == "gemini":
        assert sent["generationConfig"] == {"maxOutputTokens": 10, "topK": 3}


async def test_malformed_chunk_is_a_protocol_error(
    client: LLMClient, fake: FakeLLM, dialect: str, stream: bool
) -> None:
    fake.add(Rule(reply=Reply(content="hello world", malformed=True)))
    with pytest.raises(LLMProtocolError) as info:
        await run(client, fake, dialect, stream)
    assert len(info.value.exchanges) == 1  # type: ignore[attr-defined]
    assert len(fake.requests) == 1

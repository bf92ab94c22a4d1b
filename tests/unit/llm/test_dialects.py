from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.errors import ConfigError, LLMProtocolError, LLMStatusError
from agentd.llm import sse
from agentd.llm.dialects import get_dialect
from agentd.llm.types import LLMRequest, Message, Provider, ToolCallRequest, ToolSpec

PROVIDER = Provider(base_url="https://api.example.com", model="m-1", api_token="tok")


def history() -> list[Message]:
    call = ToolCallRequest(id="c1", name="lookup", arguments={"q": "x"}, raw_arguments='{"q":"x"}')
    return [
        Message("system", "be brief"),
        Message("user", "find x"),
        Message("assistant", None, tool_calls=[call]),
        Message("tool", "found", tool_call_id="c1", name="lookup"),
        Message("tool", "boom", tool_call_id="c2", name="lookup", is_error=True),
    ]


def request(**kw: object) -> LLMRequest:
    base: dict[str, object] = {
        "provider": PROVIDER,
        "messages": history(),
        "tools": [ToolSpec("lookup", "look", {"type": "object"})],
    }
    base.update(kw)
    return LLMRequest(**base)  # type: ignore[arg-type]


def test_unknown_dialect_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        get_dialect("cobol")


def test_urls_and_auth_headers() -> None:
    gp = Provider(base_url="http://h:1/?key=K", model="gemini-x", model_name="g-2", api_token="t")
    assert get_dialect("open_ai").url(PROVIDER, stream=True) == (
        "https://api.example.com/v1/chat/completions"
    )
    assert get_dialect("anthropic").url(PROVIDER, stream=False).endswith("/v1/messages")
    assert get_dialect("gemini").url(gp, stream=False) == (
        "http://h:1/v1beta/models/g-2:generateContent?key=K"
    )
    assert get_dialect("gemini").url(gp, stream=True) == (
        "http://h:1/v1beta/models/g-2:streamGenerateContent?key=K&alt=sse"
    )
    assert get_dialect("open_ai").headers(PROVIDER) == {"Authorization": "Bearer tok"}
    assert get_dialect("anthropic").headers(PROVIDER) == {
        "anthropic-version": "2023-06-01",
        "x-api-key": "tok",
    }
    assert get_dialect("gemini").headers(PROVIDER) == {"x-goog-api-key": "tok"}


def test_open_ai_render() -> None:
    p = (
        get_dialect("open_ai")
        .render(request(stream=True, max_tokens=100, reasoning_effort="low"))
        .payload
    )
    assert p["messages"][0] == {"role": "system", "content": "be brief"}
    assert p["messages"][2]["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"q": "x"}',
    }
    assert p["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "found"}
    assert p["tools"][0]["function"]["parameters"] == {"type": "object"}
    assert p["stream_options"] == {"include_usage": True}
    assert (p["max_tokens"], p["reasoning_effort"]) == (100, "low")


def test_anthropic_render_places_system_and_groups_tool_results() -> None:
    p = get_dialect("anthropic").render(request()).payload
    assert p["system"] == "be brief"
    assert p["max_tokens"] == 4096
    assert [m["role"] for m in p["messages"]] == ["user", "assistant", "user"]
    assert p["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"q": "x"}}
    ]
    results = p["messages"][2]["content"]
    assert [r["tool_use_id"] for r in results] == ["c1", "c2"]
    assert results[1]["is_error"] is True
    assert p["tools"][0] == {
        "name": "lookup",
        "description": "look",
        "input_schema": {"type": "object"},
    }
    assert "thinking" not in p


def test_anthropic_effort_maps_to_thinking_budget_below_max_tokens() -> None:
    p = get_dialect("anthropic").render(request(reasoning_effort="high")).payload
    assert p["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert p["max_tokens"] > 16384
    p = get_dialect("anthropic").render(request(reasoning_effort="high", max_tokens=5000)).payload
    assert p["max_tokens"] == 5000 and p["thinking"]["budget_tokens"] == 4999


def test_gemini_render() -> None:
    p = get_dialect("gemini").render(request(max_tokens=50, reasoning_effort="low")).payload
    assert p["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert [c["role"] for c in p["contents"]] == ["user", "model", "user"]
    assert p["contents"][1]["parts"][0]["functionCall"] == {
        "name": "lookup",
        "args": {"q": "x"},
        "id": "c1",
    }
    responses = [part["functionResponse"] for part in p["contents"][2]["parts"]]
    assert responses[0] == {"name": "lookup", "response": {"result": "found"}, "id": "c1"}
    assert responses[1]["response"] == {"error": "boom"}
    assert p["generationConfig"] == {
        "maxOutputTokens": 50,
        "thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": True},
    }
    assert p["tools"][0]["functionDeclarations"][0]["name"] == "lookup"


def test_gemini_echoes_per_call_thought_signature_and_hides_synthetic_ids() -> None:
    calls = [
        ToolCallRequest("s1", "a", {}, metadata={"thought_signature": "SIG", "synthetic_id": True}),
        ToolCallRequest("s2", "b", {}, metadata={"synthetic_id": True}),
    ]
    msgs = [
        Message("user", "go"),
        Message("assistant", "", tool_calls=calls),
        Message("tool", "r", tool_call_id="s1", name="a"),
    ]
    p = get_dialect("gemini").render(request(messages=msgs, reasoning_strategies=[])).payload
    parts = p["contents"][1]["parts"]
    assert parts[0] == {"functionCall": {"name": "a", "args": {}}, "thoughtSignature": "SIG"}
    assert parts[1] == {"functionCall": {"name": "b", "args": {}}}
    assert "id" not in p["contents"][2]["parts"][0]["functionResponse"]


def test_open_ai_parse_non_stream_with_invalid_arguments() -> None:
    body = {
        "model": "m",
        "choices": [
            {
                "message": {
                    "content": None,
                    "reasoning": "hmm",
                    "tool_calls": [{"id": "a", "function": {"name": "t", "arguments": "{nope"}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": 4,
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    }
    r = get_dialect("open_ai").parse(body)
    assert r.content == "" and r.reasoning == "hmm"
    assert (r.tool_calls[0].arguments, r.tool_calls[0].raw_arguments) == (None, "{nope")
    assert r.usage is not None and r.usage.reasoning_tokens == 2


def events(*datas: object) -> list[sse.Event]:
    return [sse.Event(data=d if isinstance(d, str) else json.dumps(d)) for d in datas]


def test_open_ai_stream_interleaved_parallel_tool_fragments() -> None:
    parser = get_dialect("open_ai").stream_parser()

    def tc(frag: dict) -> dict:
        return {"choices": [{"index": 0, "delta": {"tool_calls": [frag]}}]}

    for e in events(
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]},
        tc({"index": 1, "id": "b", "function": {"name": "second", "arguments": ""}}),
        tc({"index": 0, "id": "a", "function": {"name": "first", "arguments": '{"x"'}}),
        tc({"index": 1, "function": {"arguments": "{}"}}),
        tc({"index": 0, "function": {"arguments": ": 1}"}}),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}},
        "[DONE]",
    ):
        parser.feed(e)
    r = parser.finish()
    assert [(c.id, c.name, c.arguments) for c in r.tool_calls] == [
        ("a", "first", {"x": 1}),
        ("b", "second", {}),
    ]
    assert r.usage is not None and r.usage.completion_tokens == 2


def test_open_ai_stream_prefers_reasoning_content_over_reasoning() -> None:
    parser = get_dialect("open_ai").stream_parser()
    deltas = parser.feed(
        events(
            {"choices": [{"delta": {"reasoning_content": "a", "reasoning": "b", "content": "c"}}]}
        )[0]
    )
    assert [(d.content, d.reasoning) for d in deltas] == [("c", "a")]


@pytest.mark.parametrize("dialect", ["open_ai", "anthropic", "gemini"])
def test_stream_without_terminal_event_is_a_protocol_error(dialect: str) -> None:
    first = {
        "open_ai": {"choices": [{"delta": {"content": "partial"}}]},
        "anthropic": {"type": "message_start", "message": {"usage": {"input_tokens": 1}}},
        "gemini": {"candidates": [{"content": {"parts": [{"text": "partial"}]}}]},
    }[dialect]
    parser = get_dialect(dialect).stream_parser()
    parser.feed(events(first)[0])
    with pytest.raises(LLMProtocolError):
        parser.finish()


def test_anthropic_interleaved_blocks_and_error_event() -> None:
    parser = get_dialect("anthropic").stream_parser()
    for e in events(
        {"type": "message_start", "message": {"model": "c", "usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a":'},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "plan"},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "2}"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "S"},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_stop", "index": 0},
        {"type": "ping"},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ):
        parser.feed(e)
    r = parser.finish()
    assert r.reasoning == "plan" and r.metadata["thought_signature"] == "S"
    assert r.tool_calls[0].arguments == {"a": 2} and r.finish_reason == "tool_calls"
    assert r.usage is not None and (r.usage.prompt_tokens, r.usage.completion_tokens) == (5, 9)
    with pytest.raises(LLMStatusError) as info:
        get_dialect("anthropic").stream_parser().feed(
            events({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})[0]
        )
    assert info.value.status_code == 529


chunk_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "delta",
                    "content",
                    "tool_calls",
                    "index",
                    "function",
                    "arguments",
                    "name",
                    "type",
                    "message",
                    "content_block",
                    "text",
                    "candidates",
                    "parts",
                    "functionCall",
                    "args",
                    "finishReason",
                    "finish_reason",
                    "usage",
                    "partial_json",
                    "error",
                    "thinking",
                    "reasoning_content",
                    "usageMetadata",
                    "thoughtSignature",
                    "stop_reason",
                    "id",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["open_ai", "anthropic", "gemini"]),
    st.lists(st.one_of(chunk_values.map(json.dumps), st.text(max_size=30)), max_size=6),
)
def test_random_chunks_only_raise_llm_errors(dialect: str, datas: list[str]) -> None:
    parser = get_dialect(dialect).stream_parser()
    try:
        for data in datas:
            parser.feed(sse.Event(data=data))
        parser.finish()
    except (LLMProtocolError, LLMStatusError):
        pass


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["open_ai", "anthropic", "gemini"]), chunk_values)
def test_random_non_stream_bodies_only_raise_protocol_errors(dialect: str, body: object) -> None:
    with contextlib.suppress(LLMProtocolError, LLMStatusError):
        get_dialect(dialect).parse(body)

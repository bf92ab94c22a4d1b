"""A prompt's messages are rendered and encoded once, then reused while they are unchanged:
the request sent is exactly the one a fresh render and a full encode would give."""

from __future__ import annotations

import copy
import json
import math

from agentd.llm import body, merge
from agentd.llm.dialects import get_dialect
from agentd.llm.types import LLMRequest, Message, Provider, ToolCallRequest, ToolSpec

P = Provider(base_url="http://x", model="m")


def convo() -> list[Message]:
    call = ToolCallRequest(id="c1", name="add", arguments={"a": 1, "b": "é\u2028"})
    return [
        Message("user", "q \u0000 \ud800"),
        Message("assistant", "thinking out loud", reasoning="deep", tool_calls=[call]),
        Message("tool", "3", tool_call_id="c1", name="add"),
        Message("assistant", None, reasoning="more", metadata={"thought_signature": "S"}),
        Message("user", "again"),
    ]


def sent(
    messages: list[Message],
    strategies: list[str] | None = None,
    params: dict[str, object] | None = None,
) -> str:
    request = LLMRequest(
        provider=P,
        messages=messages,
        tools=[ToolSpec("add", "adds", {"type": "object"})],
        reasoning_strategies=strategies,
        llm_params=dict(params or {}),
    )
    r = get_dialect("open_ai").render(request)
    payload = merge.deep_merge(r.payload, request.llm_params)
    text = body.encode(payload, r.elements).text
    assert text == body.dumps(payload)  # the reused pieces make the same bytes
    return text


def unmemoized(messages: list[Message]) -> list[Message]:
    copies = copy.deepcopy(messages)
    for m in copies:
        m.wire.clear()
    return copies


def fresh(messages: list[Message], strategies: list[str] | None = None) -> str:
    return sent(unmemoized(messages), strategies)


def test_a_second_render_of_the_same_messages_reuses_and_matches() -> None:
    messages = convo()
    first = sent(messages)
    assert all(m.wire for m in messages)  # memoized
    assert sent(messages) == first == fresh(messages)
    assert json.loads(first)["messages"][1]["tool_calls"][0]["function"]["arguments"]


def test_changed_messages_render_again() -> None:
    messages = convo()
    sent(messages)
    messages[0].content = "edited"
    messages[1].tool_calls[0].arguments = {"a": 2}
    messages[3].metadata["thinking_blocks"] = [{"x": 1}]
    assert sent(messages) == fresh(messages)
    assert json.loads(sent(messages))["messages"][0]["content"] == "edited"


def test_each_reasoning_strategy_keeps_its_own_rendering_and_tally() -> None:
    messages = convo()
    for strategies in (None, [":xml"], [":drop"], None, [":xml"]):
        request = LLMRequest(provider=P, messages=messages, reasoning_strategies=strategies)
        memo = get_dialect("open_ai").render(request)
        copied = unmemoized(messages)
        plain = get_dialect("open_ai").render(
            LLMRequest(provider=P, messages=copied, reasoning_strategies=strategies)
        )
        assert memo.payload == plain.payload
        assert memo.reasoning_carried == plain.reasoning_carried
        assert sent(messages, strategies) == fresh(messages, strategies)


def test_llm_params_replacing_the_messages_are_encoded_as_given() -> None:
    messages = convo()
    sent(messages)
    text = sent(messages, params={"messages": [{"role": "user", "content": "override"}]})
    assert json.loads(text)["messages"] == [{"role": "user", "content": "override"}]


def test_an_unencodable_element_still_fails_the_encode() -> None:
    messages = [Message("user", "q")]
    request = LLMRequest(provider=P, messages=messages)
    r = get_dialect("open_ai").render(request)
    r.payload["messages"].append({"role": "user", "content": math.nan})
    try:
        body.encode(r.payload, r.elements)
    except ValueError:
        return
    raise AssertionError("NaN was encoded")

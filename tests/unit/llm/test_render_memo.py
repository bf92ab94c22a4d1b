"""A prompt's messages are rendered and encoded once, then reused while they are unchanged:
the request sent is exactly the one a fresh render and a full encode would give."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
import math
import random
from typing import Any

import pytest

from agentd.llm import body, merge
from agentd.llm.dialects import base, get_dialect
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
    dialect: str = "open_ai",
) -> str:
    request = LLMRequest(
        provider=P,
        messages=messages,
        tools=[ToolSpec("add", "adds", {"type": "object"})],
        reasoning_strategies=strategies,
        llm_params=dict(params or {}),
    )
    r = get_dialect(dialect).render(request)
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


# --- a request that extends an earlier one (shared messages: base.resume / base.keep) ------


def shared(messages: list[Message]) -> list[Message]:
    return [base.share(m) for m in messages]


def rng_message(rng: random.Random, i: int) -> Message:
    kind = rng.choice(["user", "assistant", "tool", "assistant_calls", "system"])
    text = "".join(rng.choice('ab é\n"\\\u2028😀') for _ in range(rng.randint(0, 12)))
    if kind == "assistant_calls":
        calls = [
            ToolCallRequest(id=f"c{i}.{j}", name="add", arguments={"a": j, "t": text})
            for j in range(rng.randint(1, 2))
        ]
        reasoning = text if rng.random() < 0.5 else None
        return Message("assistant", text or None, reasoning=reasoning, tool_calls=calls)
    if kind == "tool":
        return Message("tool", text, tool_call_id=f"c{i}", name="add", is_error=rng.random() < 0.2)
    return Message(kind, text)  # type: ignore[arg-type]


def test_an_extending_request_renders_only_its_new_messages(monkeypatch: Any) -> None:
    from agentd.llm.dialects import open_ai

    rendered: list[Message] = []
    original = open_ai._render_one

    def counting(message: Message, strategies: list[str]) -> Any:
        rendered.append(message)
        return original(message, strategies)

    monkeypatch.setattr(open_ai, "_render_one", counting)
    snapshots = 0
    snapshot = base._snapshot

    def counting_snapshot(m: Message) -> Any:
        nonlocal snapshots
        snapshots += 1
        return snapshot(m)

    monkeypatch.setattr(base, "_snapshot", counting_snapshot)
    messages = shared(convo())
    assert sent(messages) == fresh(messages)
    for i in range(30):
        rendered.clear()
        snapshots = 0
        new = shared([Message("assistant", f"a{i}"), Message("user", f"u{i}")])
        messages = [*messages, *new]
        got = sent(messages)
        assert rendered == new and snapshots == 2  # nothing earlier checked one by one
        assert got == fresh(messages)
    # One Prefix per conversation, on its first message: the latest.
    held = [m for m in messages if any(isinstance(v, base.Prefix) for v in m.wire.values())]
    assert held == [messages[0]]
    (prefix,) = [v for v in messages[0].wire.values() if isinstance(v, base.Prefix)]
    assert prefix.messages == messages
    # However many messages a request adds, it resumes (no search back from its end).
    rendered.clear()
    many = shared([Message("user", f"m{i}") for i in range(100)])
    messages = [*messages, *many]
    assert sent(messages) == fresh(messages) and rendered[:100] == many


def test_unshared_messages_are_checked_one_by_one_and_start_no_prefix() -> None:
    messages = convo()  # not shared: edits in place must show (test_changed_messages_...)
    sent(messages)
    assert not any(isinstance(v, base.Prefix) for m in messages for v in m.wire.values())
    messages[2].content = "edited in place"
    assert sent(messages) == fresh(messages)
    assert "edited in place" in sent(messages)


def test_an_unshared_message_after_a_shared_prefix_is_rendered_but_not_kept() -> None:
    messages = shared(convo())
    sent(messages)
    loose = Message("user", "not shared")
    longer = [*messages, loose]
    assert sent(longer) == fresh(longer)
    loose.content = "changed"
    assert sent(longer) == fresh(longer)  # its own memo saw the change
    assert not any(isinstance(v, base.Prefix) for v in loose.wire.values())


@pytest.mark.parametrize("dialect", ["open_ai", "anthropic", "gemini"])
def test_random_shared_histories_always_send_what_a_fresh_render_sends(dialect: str) -> None:
    """Extend, regenerate (drop the newest), replace a message, fork (two branches of one
    prefix), switch reasoning strategies and llm_params: every request's bytes are those of
    a fresh render and a full encode (anthropic and gemini merge consecutive same-role
    messages, so the last element of a Prefix is extended by the next request's first)."""
    rng = random.Random(20261202)
    branches = [shared([Message("system", "be brief"), Message("user", "go")])]
    for i in range(400):
        b = rng.randrange(len(branches))
        msgs = list(branches[b])
        op = rng.random()
        if op < 0.1 and len(msgs) > 3:  # regenerate
            del msgs[-rng.randint(1, 2) :]
        elif op < 0.15 and len(msgs) > 2:  # a middleware replaces one (never mutates)
            j = rng.randrange(len(msgs))
            msgs[j] = base.share(dataclasses.replace(msgs[j], content=f"replaced {i}"))
        elif op < 0.2:  # fork
            branches.append(list(msgs))
        msgs.extend(shared([rng_message(rng, i) for _ in range(rng.randint(0, 3))]))
        branches[b] = msgs
        strategies = rng.choice([None, None, [":xml"], [":drop"]])
        params = {"temperature": 0.5} if rng.random() < 0.2 else None
        got = sent(msgs, strategies, params, dialect)
        assert got == sent(unmemoized(msgs), strategies, params, dialect), i
        if rng.random() < 0.1:  # the same request again
            assert sent(msgs, strategies, params, dialect) == got


@pytest.mark.parametrize(
    ("dialect", "builder"),
    [("anthropic", "_assistant_blocks"), ("gemini", "_model_parts")],
)
def test_merging_dialects_fold_only_the_new_messages(
    dialect: str, builder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module(f"agentd.llm.dialects.{dialect}")
    built: list[Message] = []
    original = getattr(module, builder)

    def counting(message: Message, carry: Any) -> Any:
        built.append(message)
        return original(message, carry)

    monkeypatch.setattr(module, builder, counting)
    messages = shared(convo())
    sent(messages, dialect=dialect)
    for i in range(20):
        built.clear()
        call = ToolCallRequest(id=f"k{i}", name="add", arguments={"a": i})
        new = shared(
            [
                Message("assistant", f"a{i}", tool_calls=[call]),
                Message("tool", f"r{i}", tool_call_id=f"k{i}", name="add"),
                Message("tool", f"again {i}", tool_call_id=f"k{i}", name="add"),  # merges
            ]
        )
        messages = [*messages, *new]
        got = sent(messages, dialect=dialect)
        assert built == new[:1]
        assert got == sent(unmemoized(messages), dialect=dialect)


def test_the_joined_text_is_used_only_for_the_very_list_and_elements_it_was_built_for() -> None:
    messages = shared(convo())
    request = LLMRequest(provider=P, messages=messages)
    r = get_dialect("open_ai").render(request)
    assert r.elements.joined is not None
    items = r.payload["messages"]
    assert body.encode(r.payload, r.elements).text == body.dumps(r.payload)
    items[1] = {"role": "user", "content": "swapped after render"}  # same length, other item
    assert body.encode(r.payload, r.elements).text == body.dumps(r.payload)
    items.append({"role": "user", "content": "appended"})
    assert body.encode(r.payload, r.elements).text == body.dumps(r.payload)
    other = {**r.payload, "messages": list(items)}  # another list (deep_merge replaced it)
    assert body.encode(other, r.elements).text == body.dumps(other)


@pytest.mark.parametrize("dialect", ["anthropic", "gemini"])  # open_ai sends arguments as text
def test_a_shared_message_that_cannot_be_encoded_still_fails_every_encode(dialect: str) -> None:
    bad = ToolCallRequest(id="n", name="add", arguments={"a": math.nan})
    messages = shared([Message("user", "q"), Message("assistant", None, tool_calls=[bad])])
    for extra in ([], shared([Message("tool", "r", tool_call_id="n", name="add")])):
        with pytest.raises(ValueError):
            sent([*messages, *extra], dialect=dialect)

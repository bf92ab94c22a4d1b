from __future__ import annotations

import pytest

from agentd.llm.dialects import get_dialect
from agentd.llm.types import LLMRequest, Message, Provider

P = Provider(base_url="http://x", model="m")


def convo(signature: str | None = "SIG") -> list[Message]:
    meta = {"thought_signature": signature} if signature else {}
    return [
        Message("user", "q"),
        Message("assistant", "answer", reasoning="deep thought", metadata=meta),
        Message("user", "again"),
    ]


def render(dialect: str, strategies: list[str] | None, signature: str | None = "SIG") -> tuple:
    r = get_dialect(dialect).render(
        LLMRequest(provider=P, messages=convo(signature), reasoning_strategies=strategies)
    )
    return r.payload, r.reasoning_carried


def test_open_ai_default_sends_reasoning_content_field() -> None:
    payload, carried = render("open_ai", None)
    assert payload["messages"][1]["reasoning_content"] == "deep thought"
    assert payload["messages"][1]["content"] == "answer"
    assert carried == {"messages": 1, "chars": 12, "inline_chars": 0, "tokens_est": 3}


def test_xml_welds_think_into_content() -> None:
    payload, carried = render("open_ai", [":xml"])
    assert payload["messages"][1]["content"] == "<think>deep thought</think>\nanswer"
    assert "reasoning_content" not in payload["messages"][1]
    assert carried["inline_chars"] == len("<think>deep thought</think>\n")


def test_xml_is_only_a_fallback_but_xml_bang_always_welds() -> None:
    payload, _ = render("open_ai", ["reasoning_content", "xml"])
    assert payload["messages"][1]["content"] == "answer"
    payload, carried = render("open_ai", ["reasoning_content", "xml!"])
    assert payload["messages"][1]["content"].startswith("<think>")
    assert payload["messages"][1]["reasoning_content"] == "deep thought"
    assert carried["chars"] == 12 + carried["inline_chars"]


def test_empty_list_sends_none() -> None:
    payload, carried = render("open_ai", [])
    assert payload["messages"][1] == {"role": "assistant", "content": "answer"}
    assert carried == {"messages": 0, "chars": 0, "inline_chars": 0, "tokens_est": 0}


def test_anthropic_signed_sends_thinking_block_with_signature() -> None:
    payload, carried = render("anthropic", None)
    assert payload["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "deep thought",
        "signature": "SIG",
    }
    assert carried["messages"] == 1


@pytest.mark.parametrize("dialect", ["anthropic", "gemini"])
def test_signed_without_signature_sends_nothing_unless_xml_fallback(dialect: str) -> None:
    payload, carried = render(dialect, None, signature=None)
    assert "deep thought" not in str(payload) and carried["messages"] == 0
    payload, carried = render(dialect, [f"{dialect}_signed", "xml"], signature=None)
    assert "<think>deep thought</think>" in str(payload) and carried["inline_chars"] > 0
    payload, _ = render(dialect, [f"{dialect}_signed", "xml"])
    assert "<think>" not in str(payload)


def test_gemini_signed_sends_signed_thought_part() -> None:
    payload, _ = render("gemini", None)
    assert payload["contents"][1]["parts"][0] == {
        "text": "deep thought",
        "thought": True,
        "thoughtSignature": "SIG",
    }


def test_foreign_strategy_is_ignored() -> None:
    payload, carried = render("anthropic", ["reasoning_content"])
    assert "deep thought" not in str(payload) and carried["messages"] == 0

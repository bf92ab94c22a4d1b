"""Reasoning strategies: how an assistant message's past reasoning goes back to the model.

Strategies (reference §2.14), tried per assistant message that has reasoning:

- `reasoning_content`: an explicit `reasoning_content` field (open_ai dialect only).
- `anthropic_signed` / `gemini_signed`: the provider's signed thinking block / thought part
  (their dialect only). They need `message.metadata["thought_signature"]`; without it
  nothing native is sent rather than a shape the provider would reject.
- `xml`: weld `<think>…</think>` into the content, only when no native strategy carried it
  (so `["anthropic_signed", "xml"]` falls back to xml exactly for unsigned messages).
- `xml!`: weld even alongside a native strategy.
- `[]`: send none.  `None`: the dialect's default (`DEFAULTS`).

Strategies that do not belong to the dialect are ignored. `Tally` produces the
`reasoning_carried` record: `messages` (assistant messages whose reasoning was carried),
`chars` (all reasoning characters carried, field and welded), `inline_chars` (the welded
part, tags included) and `tokens_est` (chars / 4, rounded up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agentd.llm.types import Message

DEFAULTS: dict[str, list[str]] = {
    "open_ai": ["reasoning_content"],
    "anthropic": ["anthropic_signed"],
    "gemini": ["gemini_signed"],
}
NATIVE: dict[str, str] = {
    "open_ai": "reasoning_content",
    "anthropic": "anthropic_signed",
    "gemini": "gemini_signed",
}
SIGNED = frozenset({"anthropic_signed", "gemini_signed"})


@dataclass(frozen=True)
class Carry:
    """What to send for one assistant message."""

    native: bool = False  # send the dialect's native shape (field or signed block)
    inline: str = ""  # `<think>…</think>` to put in front of the content
    chars: int = 0  # reasoning characters the native shape carries


def normalize(strategies: list[str] | None, dialect: str) -> list[str]:
    chosen = DEFAULTS.get(dialect, []) if strategies is None else strategies
    return [str(s).lstrip(":").strip().lower() for s in chosen]


def has_signature(message: Message) -> bool:
    meta = message.metadata
    return bool(meta.get("thought_signature") or meta.get("thinking_blocks"))


def plan(message: Message, strategies: list[str], dialect: str) -> Carry:
    """Decide how `message` (an assistant message) carries its reasoning under `strategies`."""
    reasoning = message.reasoning or ""
    if message.role != "assistant" or not reasoning:
        # Signed blocks can exist without readable reasoning (redacted thinking).
        if message.role == "assistant" and "anthropic_signed" in strategies:
            blocks = message.metadata.get("thinking_blocks")
            if dialect == "anthropic" and blocks:
                return Carry(native=True)
        return Carry()
    native_name = NATIVE.get(dialect)
    native = False
    if native_name and native_name in strategies:
        native = has_signature(message) if native_name in SIGNED else True
    inline = ""
    if "xml!" in strategies or ("xml" in strategies and not native):
        inline = f"<think>{reasoning}</think>\n"
    return Carry(native=native, inline=inline, chars=len(reasoning) if native else 0)


def weld(content: str | None, carry: Carry) -> str | None:
    if not carry.inline:
        return content
    return carry.inline + (content or "")


class Tally:
    """Accumulates what a rendered prompt carried."""

    def __init__(self) -> None:
        self.messages = 0
        self.chars = 0
        self.inline_chars = 0

    def add(self, carry: Carry) -> None:
        if carry.native or carry.inline:
            self.messages += 1
        self.chars += carry.chars + len(carry.inline)
        self.inline_chars += len(carry.inline)

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "chars": self.chars,
            "inline_chars": self.inline_chars,
            "tokens_est": math.ceil(self.chars / 4),
        }

"""Token accounting of a model call: provider usage or a chars/4 estimate, prompt size.

Guarantee: every finalized turn gets a (prompt, completion, cached) triple; when the
provider reported no usage the triple is an estimate and says so (`estimated=True`).
Never: touches the database; the finalizers write what it computes.
Called by: ResponseParsing, Compaction (the loop's token budget: engine/loop_limits.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agentd.llm.types import LLMRequest, LLMResponse, Message, ToolSpec

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4  # role and separators: what chat templates add per message


@dataclass(frozen=True)
class TurnTokens:
    prompt: int
    completion: int
    cached: int
    estimated: bool

    @property
    def triple(self) -> tuple[int, int, int]:
        return self.prompt, self.completion, self.cached


def estimate_text(text: str | None) -> int:
    return -(-len(text or "") // CHARS_PER_TOKEN)  # ceil


def estimate_messages(messages: list[Message], tools: list[ToolSpec] | None = None) -> int:
    n = 0
    for m in messages:
        n += MESSAGE_OVERHEAD + estimate_text(m.content) + estimate_text(m.reasoning)
        for c in m.tool_calls:
            n += estimate_text(c.name) + estimate_text(c.raw_arguments or json.dumps(c.arguments))
    for t in tools or []:
        n += estimate_text(t.name) + estimate_text(t.description)
        n += estimate_text(json.dumps(t.input_schema))
    return n


def of_turn(request: LLMRequest | None, response: LLMResponse) -> TurnTokens:
    """The provider's usage, or an estimate from the request and the answer."""
    u = response.usage
    if u is not None and (u.prompt_tokens or u.completion_tokens):
        return TurnTokens(u.prompt_tokens, u.completion_tokens, u.cached_tokens, False)
    prompt = estimate_messages(request.messages, request.tools) if request else 0
    answer = Message(
        role="assistant",
        content=response.content,
        reasoning=response.reasoning,
        tool_calls=response.tool_calls,
    )
    return TurnTokens(prompt, estimate_messages([answer]) - MESSAGE_OVERHEAD, 0, True)

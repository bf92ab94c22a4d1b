"""Dialect-neutral request and response shapes shared by the engine and the LLM layer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class Provider:
    """Where and how to reach a model. `base_url` is an origin; the dialect appends its path."""

    base_url: str
    model: str
    api_token: str | None = None
    read_timeout: float | None = None  # inactivity timeout; None = settings.default_read_timeout
    # a stream's longest stretch without a complete event; None = settings.default_idle_timeout
    idle_timeout: float | None = None
    connect_timeout: float = 10.0
    model_name: str | None = None  # gemini: the model name used in the URL (defaults to model)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolSpec:
    """A tool advertised to the model (name as advertised, e.g. `billing__lookup`)."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})


@dataclass
class ToolCallRequest:
    """A tool call the model asked for.

    `arguments` is None when `raw_arguments` is not a JSON object: the engine turns that
    into a tool error the model can correct, never a crash.
    """

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)  # e.g. gemini thought_signature


@dataclass
class Message:
    """One message of the prompt history."""

    role: Role
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    tool_call_id: str | None = None  # role=tool: the provider call id it answers
    name: str | None = None  # role=tool: the tool name (gemini needs it)
    is_error: bool = False  # role=tool: the result is an error
    metadata: dict[str, Any] = field(default_factory=dict)  # thought_signature etc.
    # A dialect's rendering of this message and its JSON text (llm/dialects/base.py
    # `render_memo`): a long loop's prompt objects are reused turn after turn, and rendering
    # and encoding every earlier message again was most of a late turn's cost (bench B7).
    wire: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class WireExchange:
    """One HTTP attempt, secrets already redacted. Stored as an event."""

    attempt: int
    method: str
    url: str
    request_headers: dict[str, str]
    request_body: Any  # the payload as logged; None when request_wire has it
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: str = ""
    duration: float = 0.0
    error: str | None = None
    retry_delay: float | None = None  # the wait before the next attempt, if one followed
    # The body exactly as sent (llm/body.py), stored by pipeline/wire.py as a reference to
    # the loop's shared pieces, redacted (with these literal secrets too: a provider key).
    request_wire: Any = None
    request_secrets: tuple[str, ...] = field(default=(), repr=False, compare=False)


@dataclass
class LLMRequest:
    provider: Provider
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    stream: bool = False
    llm_params: dict[str, Any] = field(default_factory=dict)  # deep-merged last
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    reasoning_strategies: list[str] | None = None  # None = the dialect's default
    max_duration: float | None = None  # overall cap for the whole call incl. retries


@dataclass
class LLMResponse:
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # thought_signature, reasoning_carried
    ttft: float | None = None
    duration: float = 0.0
    exchanges: list[WireExchange] = field(default_factory=list)


@dataclass
class StreamDelta:
    """A streamed fragment handed to the caller as it arrives."""

    content: str = ""
    reasoning: str = ""


OnDelta = Callable[[StreamDelta], Awaitable[None]]

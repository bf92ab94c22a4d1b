"""What every dialect provides, and the small helpers they share."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import httpx

from agentd.errors import LLMProtocolError
from agentd.llm import body, sse
from agentd.llm.types import LLMRequest, LLMResponse, Provider, StreamDelta

T = TypeVar("T")


@dataclass
class Rendered:
    payload: dict[str, Any]
    reasoning_carried: dict[str, Any] = field(default_factory=dict)


class StreamParser(Protocol):
    def feed(self, event: sse.Event) -> list[StreamDelta]:
        """Consume one SSE event; return the deltas to hand to the caller."""
        ...

    def finish(self) -> LLMResponse:
        """The stream ended; raise LLMProtocolError if it ended before the model finished."""
        ...


class Dialect(Protocol):
    name: str

    def url(self, provider: Provider, *, stream: bool) -> str: ...

    def headers(self, provider: Provider) -> dict[str, str]: ...

    def render(self, request: LLMRequest) -> Rendered: ...

    def is_stream(self, request: LLMRequest, payload: dict[str, Any]) -> bool: ...

    def parse(self, body: Any) -> LLMResponse: ...

    def stream_parser(self) -> StreamParser: ...


def join_url(base_url: str, path: str, params: dict[str, str] | None = None) -> str:
    """Append `path` to an origin, keeping any query string it carries (e.g. gemini `key=`)."""
    url = httpx.URL(base_url)
    merged = url.copy_with(path=url.path.rstrip("/") + path)
    if params:
        merged = merged.copy_merge_params(params)
    return str(merged)


def load_json(data: str | bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise LLMProtocolError(f"{what} is not valid JSON") from exc


def expect(value: Any, kind: type[T] | tuple[type, ...], what: str) -> T:
    if not isinstance(value, kind):
        raise LLMProtocolError(f"{what}: expected {kind}, got {type(value).__name__}")
    return value  # type: ignore[return-value]


def opt(value: Any, kind: type[T] | tuple[type, ...], what: str) -> T | None:
    return None if value is None else expect(value, kind, what)


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """Tool-call arguments: `{}` when empty, None when not a JSON object (never an error)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


# json.dumps(arguments, ensure_ascii=False), built once (llm/body.py: a long loop's prompt
# re-renders every earlier call's arguments each turn).
_dump_arguments = body.encoder(separators=(", ", ": "), allow_nan=True)


def dump_arguments(arguments: dict[str, Any] | None, raw: str) -> str:
    if arguments is None:
        return raw
    return _dump_arguments(arguments)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_result_text(content: str | None) -> str:
    return content or ""

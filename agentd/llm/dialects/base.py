"""What every dialect provides, and the small helpers they share."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import httpx

from agentd.errors import LLMProtocolError
from agentd.llm import body, sse
from agentd.llm.types import LLMRequest, LLMResponse, Message, Provider, StreamDelta

T = TypeVar("T")


@dataclass
class Rendered:
    payload: dict[str, Any]
    reasoning_carried: dict[str, Any] = field(default_factory=dict)
    # id() of a conversation element of `payload` -> its JSON text (body.encode reuses it);
    # every id is of an object the payload holds, so none can be a recycled one. Its
    # `joined`, when set, is the text of the whole conversation list (a Prefix's).
    elements: body.Elements = field(default_factory=body.Elements)


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


#: The version segment each dialect's path starts with: a base_url ending in one would
#: double it (`/v1/v1/chat/completions`, a 404 that names neither cause nor fix).
_VERSION_SEGMENTS = {
    "open_ai": ("/v1", "/v1/chat/completions"),
    "anthropic": ("/v1", "/v1/messages"),
    "gemini": ("/v1beta", "/v1beta/models/{model}:generateContent"),
}


def base_url_problem(dialect: str, base_url: str) -> str | None:
    """What is wrong with an agent's base_url for its dialect, or None.

    agentd's base_url is an origin (plus any prefix a gateway needs): the dialect appends
    its own path, version segment included. A base_url ending in that segment (as SDKs
    expect, `https://api.openai.com/v1`) is refused with the fix rather than sent to
    `/v1/v1/...`.
    """
    known = _VERSION_SEGMENTS.get(dialect)
    if known is None or not base_url:
        return None
    segment, path = known
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return f"base_url {base_url!r} is not a URL"
    trimmed = url.path.rstrip("/")
    if not trimmed.lower().endswith(segment):
        return None
    # Shown without userinfo or query (a gemini `key=`): the message goes to logs.
    port = f":{url.port}" if url.port is not None else ""
    shown = f"{url.scheme}://{url.host}{port}"
    prefix = trimmed[: -len(segment)]
    return (
        f"base_url {shown}{trimmed} ends in {trimmed[-len(segment) :]}, but the {dialect} "
        f"dialect appends {path} itself (requests would go to ...{segment}{path}): drop "
        f"the trailing {segment}, base_url = {shown}{prefix} (agentd adds the path)"
    )


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


def _snapshot(m: Message) -> tuple[Any, ...]:
    # What a rendering reads. Compared with ==, which for the same objects is an identity
    # check: a message whose fields were replaced (or a call's arguments) renders again.
    calls = tuple((c.id, c.name, id(c.arguments), c.raw_arguments) for c in m.tool_calls)
    return (m.role, m.content, m.reasoning, m.tool_call_id, m.name, m.is_error, calls,
            id(m.metadata), len(m.metadata))  # fmt: skip


def render_memo(
    message: Message,
    key: Any,
    render: Callable[[], tuple[dict[str, Any], T]],
    elements: dict[int, str],
) -> tuple[dict[str, Any], T, str | None]:
    """`render()` of `message` — (its element of the payload, what else the dialect needs
    from it) — memoized on the message under `key` (the dialect and its options), with the
    element's JSON text recorded in `elements` for body.encode. The element is shared by
    every request the message is in again: nothing may mutate it (deep_merge copies)."""
    snap = _snapshot(message)
    hit = message.wire.get(key)
    if hit is None or hit[0] != snap:
        out, extra = render()
        try:
            text: str | None = body.dumps(out)
        except ValueError:  # not encodable (NaN): the whole body's encode says so, as before
            text = None
        hit = (snap, out, extra, text)
        message.wire[key] = hit
    if hit[3] is not None:
        elements[id(hit[1])] = hit[3]
    return hit[1], hit[2], hit[3]


# A Message marked shared (`share`) is one its maker reuses, unchanged, in every later
# prompt that shows it: pipeline/llm/prompt.py's, for a loop's rows. It is never mutated in
# place (a change replaces it), so a request whose messages start with the very messages
# of an earlier one can reuse that one's rendering whole instead of checking each.
SHARED = "agentd.shared"


def share(message: Message) -> Message:
    message.wire[SHARED] = True
    return message


@dataclass(frozen=True)
class Prefix:
    """A rendered request's conversation, kept on its first message (under the dialect's
    key): the elements of the payload's conversation list, their JSON text joined, and the
    dialect's fold state after them (e.g. the reasoning tally)."""

    messages: list[Message]
    elements: list[Any]
    closed: int  # the first `closed` elements are final (a merging dialect's last is open)
    joined: str | None  # ",".join of their JSON text (None: one is not encodable)
    state: Any


def resume(messages: list[Message], key: Any) -> Prefix | None:
    """The Prefix of an earlier request whose messages `messages` starts with (the same
    shared messages, or equal ones), else None. O(1) but for the one list comparison,
    which for the same objects is an identity check per element in C."""
    p: Prefix | None = messages[0].wire.get((SHARED, key)) if messages else None
    if p is None or len(p.messages) > len(messages):
        return None
    return p if messages[: len(p.messages)] == p.messages else None


def join(joined: str, texts: list[str]) -> str:
    """`joined` (texts already joined with ",") and more texts, joined with ","."""
    if not texts:
        return joined
    return ",".join([joined, *texts]) if joined else ",".join(texts)


def reopen(messages: list[Message], key: Any, inner: str) -> tuple[Prefix | None, list[Any]]:
    """For a dialect whose consecutive same-role messages merge into one element (its
    `inner` list extended): the Prefix `messages` extends, and its elements with the last
    one copied, so that extending it leaves the Prefix's (and earlier payloads') alone."""
    found = resume(messages, key)
    if found is None:
        return None, []
    out = list(found.elements)
    if out:
        out[-1] = {**out[-1], inner: list(out[-1][inner])}
    return found, out


def close(
    messages: list[Message],
    key: Any,
    out: list[Any],
    found: Prefix | None,
    state: Any,
    elements: body.Elements,
) -> None:
    """After a merging dialect folded `messages` into `out` (from `reopen`): the whole
    list's text for body.encode, and the Prefix a later request resumes (all but the last
    element closed)."""
    n = found.closed if found is not None else 0
    joined = found.joined if found is not None else ""
    texts: list[str] = []
    if joined is not None:
        try:
            texts = [body.dumps(e) for e in out[n:]]
        except ValueError:  # not encodable (NaN): the whole body's encode says so
            joined = None
    closed = max(n, len(out) - 1)
    if joined is not None:
        stable = join(joined, texts[: closed - n])
        elements.joined = (out, list(out), join(stable, texts[closed - n :]))
        joined = stable
    keep(messages, key, Prefix(list(messages), list(out), closed, joined, state), found)


def keep(messages: list[Message], key: Any, prefix: Prefix, found: Prefix | None) -> None:
    """Hold `prefix` on the request's first message (replacing the one it extended, or
    any other: one per conversation) if every message is shared (those of `found` were)."""
    n = len(found.messages) if found is not None else 0
    if messages and all(m.wire.get(SHARED) for m in messages[n:]):
        messages[0].wire[(SHARED, key)] = prefix


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_result_text(content: str | None) -> str:
    return content or ""

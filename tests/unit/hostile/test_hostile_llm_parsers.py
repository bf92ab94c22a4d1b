"""Hostile LLM endpoints: whatever bytes or JSON a provider (or something pretending to be
one) sends, the SSE decoder and every dialect's parsers either produce a response or raise
LLMProtocolError (an LLMError) — never another exception, never a hang."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.errors import LLMError, LLMProtocolError
from agentd.llm import sse, xml_tool_calls
from agentd.llm.dialects import NAMES, get_dialect
from agentd.llm.types import LLMResponse

# Field names the three dialects read, so generated objects reach deep into the parsers.
VOCAB = [
    "choices", "message", "delta", "content", "role", "tool_calls", "function", "name",
    "arguments", "id", "index", "type", "text", "usage", "finish_reason", "stop_reason",
    "reasoning_content", "reasoning", "prompt_tokens", "completion_tokens", "input_tokens",
    "output_tokens", "candidates", "parts", "functionCall", "args", "thought",
    "thoughtSignature", "usageMetadata", "promptTokenCount", "candidatesTokenCount",
    "finishReason", "content_block", "tool_use", "input", "partial_json", "thinking",
    "signature", "error", "model", "stop_sequence", "cache_read_input_tokens",
]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(VOCAB)
)
json_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(VOCAB) | st.text(max_size=5), inner, max_size=6)
    ),
    max_leaves=40,
)
objects = st.dictionaries(st.sampled_from(VOCAB), json_like, max_size=6)
SLOW = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _json_text(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


@pytest.mark.parametrize("dialect", NAMES)
@SLOW
@given(body=json_like | objects)
def test_a_hostile_body_parses_or_raises_a_protocol_error(dialect: str, body: Any) -> None:
    try:
        out = get_dialect(dialect).parse(body)
    except LLMError:
        return
    assert isinstance(out, LLMResponse)


@pytest.mark.parametrize("dialect", NAMES)
@SLOW
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from(["", "message", "content_block_delta", "message_stop", "error"])
            | st.text(max_size=8),
            st.one_of(
                objects.map(_json_text),
                json_like.map(_json_text),
                st.text(max_size=40),
                st.sampled_from(["[DONE]", "", "{", "null", "{}"]),
            ),
        ),
        max_size=8,
    )
)
def test_hostile_stream_events_parse_or_raise_a_protocol_error(
    dialect: str, events: list[tuple[str, str]]
) -> None:
    parser = get_dialect(dialect).stream_parser()
    try:
        for name, data in events:
            deltas = parser.feed(sse.Event(event=name, data=data))
            assert isinstance(deltas, list)
        out = parser.finish()
    except LLMError:
        return
    assert isinstance(out, LLMResponse)


def _decode(chunks: list[bytes]) -> list[sse.Event]:
    d = sse.SSEDecoder()
    out: list[sse.Event] = []
    for c in chunks:
        out += d.feed(c)
    return out + d.flush()


@settings(max_examples=400, deadline=None)
@given(raw=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=12))
def test_sse_decoding_of_any_bytes_does_not_depend_on_chunking(raw: bytes, cuts: list[int]) -> None:
    points = sorted({c for c in cuts if c <= len(raw)} | {0, len(raw)})
    chunks = [raw[a:b] for a, b in itertools.pairwise(points)]
    assert _decode(chunks) == _decode([raw])


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from(["data", "event", "id", "retry", ":", "dat a", ""]),
            st.text(
                alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]),
                max_size=12,
            ),
            st.sampled_from(["\n", "\r", "\r\n", "\n\n", "\r\n\r\n"]),
        ),
        max_size=12,
    )
)
def test_sse_line_endings_are_interchangeable(lines: list[tuple[str, str, str]]) -> None:
    def build(ending: dict[str, str]) -> bytes:
        return "".join(f"{k}: {v}{ending.get(e, e)}" for k, v, e in lines).encode()

    lf = build({"\r": "\n", "\r\n": "\n", "\r\n\r\n": "\n\n"})
    as_sent = build({})
    assert _decode([as_sent]) == _decode([lf])


def test_an_endless_line_is_refused_in_linear_time() -> None:
    decoder = sse.SSEDecoder()
    chunk = b"a" * 4096
    started = time.monotonic()
    with pytest.raises(LLMProtocolError, match="longer than"):
        for _ in range(sse.MAX_LINE // len(chunk) + 2):
            decoder.feed(chunk)
    assert time.monotonic() - started < 5  # was quadratic: minutes for 1 MB


def test_one_byte_chunks_of_a_long_line_stay_linear() -> None:
    decoder = sse.SSEDecoder()
    started = time.monotonic()
    for _ in range(200_000):
        decoder.feed(b"x")
    assert decoder.feed(b"\n\n") == []  # "x..." is a field name without a value
    assert time.monotonic() - started < 5


def test_an_endless_event_of_many_data_lines_is_refused() -> None:
    decoder = sse.SSEDecoder()
    line = b"data: " + b"y" * 65536 + b"\n"
    with pytest.raises(LLMProtocolError, match="larger than"):
        for _ in range(sse.MAX_LINE // 65536 + 2):
            decoder.feed(line)


def test_nul_bytes_and_invalid_utf8_decode_to_replacement_characters() -> None:
    events = _decode([b"data: a\x00b\xff\xfe\n\n"])
    assert events == [sse.Event("", "a\x00b\ufffd\ufffd")]


@settings(max_examples=400, deadline=None)
@given(
    content=st.text(max_size=200)
    | st.lists(
        st.sampled_from(
            [
                "<tool_call>", "</tool_call>", "<function=", "<parameter=", "</parameter>",
                "</function>", '{"name": "x", "arguments": {}}', "{", "}", ">", "add", "\x00",
                '{"name": 1}', '{"arguments": "a"}', "<tool_call><tool_call>",
            ]
        )
        | st.text(max_size=10),
        max_size=20,
    ).map("".join)
)  # fmt: skip
def test_xml_tool_call_parsing_never_crashes(content: str) -> None:
    text, calls = xml_tool_calls.parse(content)
    assert isinstance(text, str)
    for call in calls:
        assert isinstance(call.name, str) and call.name


def test_xml_tool_call_parsing_of_a_huge_unclosed_block_is_fast() -> None:
    content = "<tool_call>" + "{" * 200_000
    started = time.monotonic()
    xml_tool_calls.parse(content)
    xml_tool_calls.parse("<tool_call>" * 50_000)
    assert time.monotonic() - started < 5

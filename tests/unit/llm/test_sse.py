from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentd.llm.sse import Event, SSEDecoder


def decode(*chunks: bytes) -> list[Event]:
    d = SSEDecoder()
    out = []
    for c in chunks:
        out += d.feed(c)
    return out + d.flush()


def test_events_split_across_chunks_and_line_endings() -> None:
    raw = b'event: a\r\ndata: {"x":\r\ndata: 1}\r\n\r\n: comment\n\ndata: two\r\rdata:three\n\n'
    whole = decode(raw)
    assert whole == [Event("a", '{"x":\n1}'), Event("", "two"), Event("", "three")]
    assert decode(*[raw[i : i + 1] for i in range(len(raw))]) == whole


def test_final_event_without_blank_line_is_flushed() -> None:
    assert decode(b"data: [DONE]") == [Event("", "[DONE]")]


def test_utf8_split_inside_a_character() -> None:
    raw = "data: héllo ✓\n\n".encode()
    assert decode(raw[:8], raw[8:9], raw[9:]) == [Event("", "héllo ✓")]


@given(st.binary(max_size=400), st.integers(min_value=1, max_value=50))
def test_random_bytes_never_crash_and_chunking_does_not_matter(raw: bytes, size: int) -> None:
    whole = decode(raw)
    assert decode(*[raw[i : i + size] for i in range(0, len(raw), size)]) == whole

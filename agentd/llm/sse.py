"""Incremental Server-Sent Events decoding for LLM streams.

httpx-sse's `EventSource` insists on a `text/event-stream` content type and drops a final
event that is not followed by a blank line; LLM proxies do both, so the stream parsers use
this small pure decoder instead (the same line rules as the WHATWG spec and httpx-sse).
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator
from dataclasses import dataclass

from agentd.errors import LLMProtocolError


@dataclass(frozen=True)
class Event:
    """One dispatched SSE event."""

    event: str = ""
    data: str = ""
    id: str = ""


#: Longest line, and largest event, a stream may send (characters). Real events are a few
#: kilobytes; past this the endpoint is broken or hostile and the turn fails cleanly.
MAX_LINE = 8 * 1024 * 1024


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the events they complete.

    Linear in the input however it is chunked: a line's pieces are kept in a list and
    scanned once, when its line break arrives (a stream of 1-byte chunks with no newline
    must not rescan a growing buffer and starve the event loop). Lines and events longer
    than MAX_LINE raise LLMProtocolError.
    """

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._tail: list[str] = []  # an unterminated line, in pieces; no line break inside
        self._tail_len = 0
        self._event = ""
        self._data: list[str] = []
        self._data_len = 0
        self._id = ""

    def feed(self, chunk: bytes) -> list[Event]:
        return self._take(self._text.decode(chunk), final=False)

    def flush(self) -> list[Event]:
        """End of stream: dispatch a last event even without its blank line."""
        events = self._take(self._text.decode(b"", final=True), final=True)
        if self._tail:
            self._line("".join(self._tail), events)
            self._tail, self._tail_len = [], 0
        self._dispatch(events)
        return events

    def _take(self, text: str, *, final: bool) -> list[Event]:
        events: list[Event] = []
        if "\n" not in text and "\r" not in text and not final:
            if text:
                self._tail.append(text)
                self._tail_len += len(text)
                if self._tail_len > MAX_LINE:
                    raise LLMProtocolError(f"stream line longer than {MAX_LINE} characters")
            return events
        buf = "".join(self._tail) + text
        self._tail, self._tail_len = [], 0
        if "\r" not in buf:  # the common case: split in C, not character by character
            *lines, rest = buf.split("\n")
            for line in lines:
                self._line(line, events)
            if rest:
                if len(rest) > MAX_LINE:
                    raise LLMProtocolError(f"stream line longer than {MAX_LINE} characters")
                self._tail, self._tail_len = [rest], len(rest)
            return events
        start = 0
        n = len(buf)
        i = 0
        while i < n:
            ch = buf[i]
            if ch == "\n" or ch == "\r":
                if ch == "\r" and i + 1 == n and not final:
                    break  # a lone \r may be the first half of \r\n: wait for more
                self._line(buf[start:i], events)
                if ch == "\r" and i + 1 < n and buf[i + 1] == "\n":
                    i += 1
                start = i + 1
            i += 1
        rest = buf[start:]
        if rest:
            if len(rest) > MAX_LINE:
                raise LLMProtocolError(f"stream line longer than {MAX_LINE} characters")
            self._tail, self._tail_len = [rest], len(rest)
        return events

    def _line(self, line: str, events: list[Event]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._data_len += len(value) + 1
            if self._data_len > MAX_LINE:
                raise LLMProtocolError(f"stream event larger than {MAX_LINE} characters")
        elif name == "id" and "\0" not in value:
            self._id = value

    def _dispatch(self, events: list[Event]) -> None:
        if self._data or self._event:
            events.append(Event(event=self._event, data="\n".join(self._data), id=self._id))
        self._event = ""
        self._data = []
        self._data_len = 0


async def aiter_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[Event]:
    """Decode an async byte stream into events, flushing at the end."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.flush():
        yield event

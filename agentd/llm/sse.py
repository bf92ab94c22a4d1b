"""Incremental Server-Sent Events decoding for LLM streams.

httpx-sse's `EventSource` insists on a `text/event-stream` content type and drops a final
event that is not followed by a blank line; LLM proxies do both, so the stream parsers use
this small pure decoder instead (the same line rules as the WHATWG spec and httpx-sse).
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """One dispatched SSE event."""

    event: str = ""
    data: str = ""
    id: str = ""


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the events they complete."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._event = ""
        self._data: list[str] = []
        self._id = ""

    def feed(self, chunk: bytes) -> list[Event]:
        self._buffer += self._text.decode(chunk)
        return self._drain(final=False)

    def flush(self) -> list[Event]:
        """End of stream: dispatch a last event even without its blank line."""
        self._buffer += self._text.decode(b"", final=True)
        events = self._drain(final=True)
        if self._buffer:
            self._line(self._buffer, events)
            self._buffer = ""
        self._dispatch(events)
        return events

    def _drain(self, *, final: bool) -> list[Event]:
        events: list[Event] = []
        buf = self._buffer
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
        self._buffer = buf[start:]
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
        elif name == "id" and "\0" not in value:
            self._id = value

    def _dispatch(self, events: list[Event]) -> None:
        if self._data or self._event:
            events.append(Event(event=self._event, data="\n".join(self._data), id=self._id))
        self._event = ""
        self._data = []


async def aiter_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[Event]:
    """Decode an async byte stream into events, flushing at the end."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.flush():
        yield event

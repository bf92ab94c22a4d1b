"""Incremental `text/event-stream` parsing for Streamable HTTP answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Event:
    data: str
    event: str = "message"
    id: str | None = None


class EventParser:
    """Feed decoded text lines; collect complete events (WHATWG SSE rules, no retry handling)."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None

    def feed_line(self, line: str) -> Event | None:
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            self._id = value
        return None

    def flush(self) -> Event | None:
        """End of stream: a final event without its blank line still counts."""
        return self._dispatch()

    def _dispatch(self) -> Event | None:
        if not self._data:
            self._event = ""
            return None
        event = Event(data="\n".join(self._data), event=self._event or "message", id=self._id)
        self._data, self._event = [], ""
        return event


def parse(text: str) -> list[Event]:
    parser = EventParser()
    events = [e for line in text.split("\n") if (e := parser.feed_line(line))]
    if tail := parser.flush():
        events.append(tail)
    return events

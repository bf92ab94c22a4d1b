"""Incremental `text/event-stream` parsing for Streamable HTTP answers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Event:
    data: str
    event: str = "message"
    id: str | None = None


class EventParser:
    """Feed decoded text lines; collect complete events (WHATWG SSE rules).

    `last_event_id` and `retry` (milliseconds) persist across events, as the rules say:
    they are what a client needs to resume a closed stream with `GET` + `Last-Event-ID`.
    """

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self.retry: int | None = None

    @property
    def last_event_id(self) -> str | None:
        return self._id

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
        elif field == "id" and "\0" not in value:
            self._id = value
        elif field == "retry" and value.isdigit():
            self.retry = int(value)
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

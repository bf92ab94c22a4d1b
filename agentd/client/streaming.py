"""Resuming a loop's live stream: Last-Event-ID after a dropped connection, no duplicates.

The server ends a stream after a terminal or paused `status` event. A stream that ends any
other way (a restart, a proxy, a network blip) was dropped: the client reconnects with the
id of the last event it saw. The server then re-sends committed messages after it (deltas
are never replayed; the message that follows them carries the full text) and the loop's
current status; this module drops what was already yielded: a message id seen before, and a
status equal to the last one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agentd.client.models import StreamEvent

#: After one of these statuses the server closes the stream on purpose.
END_STATUSES = frozenset({"completed", "failed", "stopped", "paused"})


@dataclass
class Resumption:
    last_event_id: str | None = None
    seen_messages: set[int] = field(default_factory=set)
    last_status: tuple[str, str | None] | None = None
    finished: bool = False

    def headers(self) -> dict[str, str]:
        return {"Last-Event-ID": self.last_event_id} if self.last_event_id else {}

    def accept(self, event: str, id_: str, data: str) -> StreamEvent | None:
        """The event to yield, or None when it repeats one already yielded."""
        if id_:
            self.last_event_id = id_
        try:
            payload = json.loads(data) if data else {}
        except ValueError:
            payload = {"raw": data}
        if not isinstance(payload, dict):
            payload = {"value": payload}
        if event == "message":
            mid = payload.get("id")
            if isinstance(mid, int):
                if mid in self.seen_messages:
                    return None
                self.seen_messages.add(mid)
        elif event == "status":
            status = str(payload.get("status"))
            key = (status, payload.get("reason"))
            if status in END_STATUSES:
                self.finished = True
            if key == self.last_status:
                return None
            self.last_status = key
        return StreamEvent(event=event or "message", id=id_, data=payload)


def backoff(attempt: int) -> float:
    """Seconds before reconnect number `attempt` (1, 2, ...): 0.2 doubling, at most 5."""
    return float(min(0.2 * 2 ** (attempt - 1), 5.0))

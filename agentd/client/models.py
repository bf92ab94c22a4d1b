"""The client's typed models: the API's own response schemas, plus stream events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentd.api.routes_schedules import ScheduleOut
from agentd.api.routes_state import StateOut
from agentd.api.routes_webhooks import DeliveryOut, EndpointOut
from agentd.api.schemas import (
    AgentUpgradeOut,
    CostsOut,
    EventOut,
    InputRequestOut,
    LoopOut,
    LoopUpgradeOut,
    MessageOut,
    Page,
    ProvidersOut,
    SentMessageOut,
    SentOut,
    ToolCallOut,
)

__all__ = [
    "AgentUpgradeOut",
    "CostsOut",
    "DeliveryOut",
    "EndpointOut",
    "EventOut",
    "InputRequestOut",
    "LoopOut",
    "LoopUpgradeOut",
    "MessageOut",
    "Page",
    "ProvidersOut",
    "ScheduleOut",
    "SentMessageOut",
    "SentOut",
    "StateOut",
    "StreamEvent",
    "ToolCallOut",
]


@dataclass(frozen=True)
class StreamEvent:
    """One Server-Sent Event of GET /v1/loops/{id}/stream.

    `event` is `status`, `delta`, `message`, `approval` or `sent`; `data` its JSON payload;
    `message` the parsed MessageOut for `message` events.
    """

    event: str
    id: str
    data: dict[str, Any]

    @property
    def message(self) -> MessageOut | None:
        return MessageOut.model_validate(self.data) if self.event == "message" else None

    @property
    def delta(self) -> str:
        return str(self.data.get("delta", "")) if self.event == "delta" else ""

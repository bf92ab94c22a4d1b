"""What an MCP exchange leaves behind: the wire records, a discovered tool, a session, a call's
outcome. Plain data, shared by the client and the process-wide session cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Exchange", "McpTool", "SessionInfo", "ToolOutcome"]


@dataclass
class Exchange:
    """One request/response on the wire, as the engine records it in an event."""

    server: str
    method: str
    raw_request: str
    raw_response: str
    status: int | None
    stderr: str | None
    duration: float
    session_id: str | None = None
    request_headers: dict[str, str] = field(default_factory=dict)
    response_headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # set when the transport raised

    def as_event(self) -> dict[str, Any]:
        return {
            "server": self.server, "method": self.method, "status": self.status,
            "duration": self.duration, "session_id": self.session_id,
            "raw_request": self.raw_request, "raw_response": self.raw_response,
            "stderr": self.stderr, "request_headers": self.request_headers,
            "response_headers": self.response_headers, "error": self.error,
        }  # fmt: skip


@dataclass
class McpTool:
    name: str  # as advertised to the model (prefixed)
    remote_name: str
    server: str
    description: str
    input_schema: dict[str, Any]
    requires_approval: bool = False
    task_support: str | None = None  # MCP execution.taskSupport: optional | required


@dataclass
class SessionInfo:
    session_id: str
    metadata: dict[str, Any]
    exchanges: list[Exchange]
    stateless: bool = False


@dataclass
class ToolOutcome:
    text: str
    structured: Any
    is_error: bool
    session_id: str
    exchanges: list[Exchange]
    content: list[dict[str, Any]] = field(default_factory=list)
    error_code: int | None = None  # set for a JSON-RPC (protocol) error answer
    # 2026-07-28: the server needs input first ({"inputRequests": {...}, "requestState"}).
    input_required: dict[str, Any] | None = None
    # The server runs the call as an MCP task: its handle ({"taskId", "status", ...}).
    task: dict[str, Any] | None = None
    # The JSON-RPC error code when the server called our request malformed (CLIENT_BUG_CODES).
    client_error: int | None = None

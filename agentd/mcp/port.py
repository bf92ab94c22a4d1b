"""The MCP transport port: deliver one JSON-RPC envelope, return what came back.

Rules every transport keeps:
- tool failures are successful `tools/call` results with `isError: true`;
- protocol failures are JSON-RPC error envelopes in `body`;
- transport failures (unreachable, timeout, garbage) raise `agentd.errors.McpError`;
- stateless and safe under concurrent use: per-session state is keyed by `session_id`;
- constructible from an `mcps` entry alone (see `agentd.mcp.config.McpServerConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class CallContext:
    """What a tool handler knows about its caller.

    In-process calls from a loop carry agent and loop; calls through a mounted MCP
    endpoint carry only the principal the authorizer returned.
    """

    # `Any`, not `Agent` / `LoopView`: agent.py sits above mcp/, so naming them here would
    # run up the floors (docs/concepts.md); a tool reads them as it needs.
    agent: Any = None
    loop: Any = None
    principal: Any = None  # what the mount's authorizer or the agent's mcp_principal gave
    idempotency_key: str | None = None
    tool_call_id: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class DeliveryResult:
    body: dict[str, Any] | None  # None for notifications answered 202
    session_id: str | None
    raw_request: str
    raw_response: str
    status: int | None = None
    stderr: str | None = None
    duration: float = 0.0
    # Server→client requests the server sent mid-call and agentd refused (handshake era:
    # it cannot hold a connection open across a person's answer), e.g. elicitation/create.
    refused: list[str] = field(default_factory=list)


@runtime_checkable
class Transport(Protocol):
    """Anything with this shape can carry MCP for an agent."""

    kind: str  # "http" | "stdio" | "local" | "custom"

    async def deliver(
        self,
        payload: dict[str, Any],
        *,
        session_id: str | None = None,
        context: CallContext | None = None,
    ) -> DeliveryResult: ...


IDEMPOTENCY_META_KEY = "agentd/idempotencyKey"


def idempotency_key(tool_call_id: int) -> str:
    return f"agentd:tool_call:{tool_call_id}"

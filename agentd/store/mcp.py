"""MCP rows: outbound sessions and tools per loop, inbound sessions of mounted servers.

Called by: engine (tool discovery, tool execution, the MCP session ender), the MCP endpoint,
janitor, admin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from agentd.db.pool import Connection
from agentd.store import events
from agentd.store.models import McpToolRow, NewEvent
from agentd.store.queries import sql


@dataclass(frozen=True)
class Discovered:
    """What a discovery found, as the statements that record it take it: `sessions`
    (`mcp_name`, `session_id`, `transport_kind`, `metadata`) and `tools` (`server`: the
    session's mcp_name; `name`, `remote_name`, `description`, `input_schema`,
    `requires_approval`)."""

    sessions: list[dict[str, Any]]
    tools: list[dict[str, Any]]

    def rows(self, loop_id: UUID) -> list[McpToolRow]:
        """The tools as `list_tools` shows them, before they are stored: row ids are 0."""
        by_name = {s["mcp_name"]: s for s in self.sessions}
        return [
            McpToolRow(
                id=0,
                mcp_session_id=0,
                loop_id=loop_id,
                name=t["name"],
                remote_name=t["remote_name"],
                description=t["description"],
                input_schema=t["input_schema"] or {},
                requires_approval=bool(t["requires_approval"]),
                mcp_name=t["server"],
                session_id=by_name[t["server"]]["session_id"],
                transport_kind=by_name[t["server"]]["transport_kind"],
                task_support=(by_name[t["server"]]["metadata"].get("taskTools") or {}).get(
                    t["remote_name"]
                ),
            )
            for t in self.tools
        ]


async def upsert_session(
    conn: Connection,
    *,
    loop_id: UUID,
    mcp_name: str,
    session_id: str | None,
    transport_kind: str,
    metadata: dict[str, Any],
) -> int:
    rec = await conn.fetchrow(
        sql("mcp_session_upsert"), loop_id, mcp_name, session_id, transport_kind, metadata
    )
    return int(rec["id"])


async def list_sessions(conn: Connection, *, loop_id: UUID) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(sql("mcp_session_list"), loop_id)]


async def set_session_id(
    conn: Connection, *, loop_id: UUID, mcp_name: str, session_id: str | None
) -> None:
    await conn.execute(sql("mcp_session_set_id"), loop_id, mcp_name, session_id)


async def claim_sessions_to_end(
    conn: Connection, *, grace: float, batch: int
) -> list[dict[str, Any]]:
    """Forget (and return, with their loop) the HTTP session ids of loops terminal for
    `grace` seconds; the caller commits, then ends each with DELETE."""
    return [dict(r) for r in await conn.fetch(sql("mcp_session_end_claim"), grace, batch)]


async def replace_tools(conn: Connection, *, loop_id: UUID, tools: list[dict[str, Any]]) -> None:
    await conn.execute(
        sql("mcp_tool_replace"),
        loop_id,
        [t["session_row_id"] for t in tools],
        [t["name"] for t in tools],
        [t["remote_name"] for t in tools],
        [t["description"] for t in tools],
        [t["input_schema"] for t in tools],
        [t["requires_approval"] for t in tools],
    )


async def record_discovery(
    conn: Connection,
    *,
    loop_id: UUID,
    execution_token: UUID,
    sessions: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    wire_events: Sequence[NewEvent],
) -> list[McpToolRow] | None:
    """A discovery's sessions and tools (as `Discovered` holds them) and wire-log events,
    in one statement fenced by the turn's execution token under the loop's row lock
    (`mcp_discovery_record`). Returns the loop's tools as `list_tools` does, or None when
    the fence is lost: then nothing was written."""
    doc = {
        "loop_id": loop_id,
        "execution_token": execution_token,
        "sessions": list(sessions),
        "tools": list(tools),
        "events": events.documents(wire_events, ()),
    }
    rec = await conn.fetchrow(sql("mcp_discovery_record"), doc)
    if rec is None or not rec["fenced"]:
        return None
    return [McpToolRow.from_json(t) for t in rec["tools"]]


async def list_tools(conn: Connection, *, loop_id: UUID) -> list[McpToolRow]:
    return [McpToolRow.from_record(r) for r in await conn.fetch(sql("mcp_tool_list"), loop_id)]


async def insert_inbound(
    conn: Connection,
    *,
    server_name: str,
    session_id: str,
    principal: str | None,
    protocol_version: str | None,
) -> dict[str, Any] | None:
    """The new row, or None when `session_id` is already taken (by any server)."""
    rec = await conn.fetchrow(
        sql("mcp_inbound_session_insert"), server_name, session_id, principal, protocol_version
    )
    return dict(rec) if rec else None


async def upsert_stateless_inbound(
    conn: Connection,
    *,
    server_name: str,
    session_id: str,
    principal: str | None,
    protocol_version: str | None,
) -> dict[str, Any]:
    rec = await conn.fetchrow(
        sql("mcp_inbound_session_upsert_stateless"),
        server_name,
        session_id,
        principal,
        protocol_version,
    )
    return dict(rec)


async def touch_inbound(
    conn: Connection, *, server_name: str, session_id: str, principal: str | None
) -> dict[str, Any] | None:
    rec = await conn.fetchrow(sql("mcp_inbound_session_touch"), server_name, session_id, principal)
    return dict(rec) if rec else None


async def terminate_inbound(
    conn: Connection, *, server_name: str, session_id: str, principal: str | None
) -> dict[str, Any] | None:
    rec = await conn.fetchrow(
        sql("mcp_inbound_session_terminate"), server_name, session_id, principal
    )
    return dict(rec) if rec else None


async def prune_inbound(conn: Connection, *, cutoff: datetime, batch: int) -> int:
    return int(await conn.fetchval(sql("mcp_inbound_session_prune"), cutoff, batch))


async def list_inbound(
    conn: Connection, *, before_id: int | None, limit: int
) -> list[dict[str, Any]]:
    """Inbound sessions, newest first; `before_id` is the keyset cursor."""
    rows = await conn.fetch(sql("mcp_inbound_session_list"), before_id, limit)
    return [dict(r) for r in rows]


async def get_inbound(conn: Connection, *, inbound_id: int) -> dict[str, Any] | None:
    rec = await conn.fetchrow(sql("mcp_inbound_session_get"), inbound_id)
    return dict(rec) if rec else None

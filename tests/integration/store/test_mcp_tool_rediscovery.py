"""A retried first turn discovers its tools again: replacing them must not collide."""

from __future__ import annotations

from agentd.db.pool import Pool, transaction
from agentd.store import mcp
from agentd.testing import factories


def spec(session: int, name: str, *, approval: bool = False, desc: str = "") -> dict:  # type: ignore[type-arg]
    return {
        "session_row_id": session,
        "name": name,
        "remote_name": name,
        "description": desc,
        "input_schema": {"type": "object"},
        "requires_approval": approval,
    }


async def test_replacing_a_loops_tools_twice_updates_them_in_place(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running")
        session = await mcp.upsert_session(
            conn,
            loop_id=loop.id,
            mcp_name="calc",
            session_id=None,
            transport_kind="local",
            metadata={},
        )
        await mcp.replace_tools(
            conn, loop_id=loop.id, tools=[spec(session, "add"), spec(session, "gone")]
        )
    async with transaction(pool) as conn:  # the same discovery, run by the retried turn
        await mcp.replace_tools(
            conn,
            loop_id=loop.id,
            tools=[spec(session, "add", desc="v2"), spec(session, "refund", approval=True)],
        )
        rows = await mcp.list_tools(conn, loop_id=loop.id)
    assert sorted((t.name, t.description, t.requires_approval) for t in rows) == [
        ("add", "v2", False),
        ("refund", "", True),
    ]

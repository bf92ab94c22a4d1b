"""A retried first turn discovers its tools again: replacing them must not collide."""

from __future__ import annotations

import uuid

from agentd.db.pool import Pool, connection, transaction
from agentd.store import events, mcp
from agentd.store.models import NewEvent
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


def found(name: str, *, server: str = "calc", desc: str = "", approval: bool = False) -> dict:  # type: ignore[type-arg]
    return {
        "server": server,
        "name": name,
        "remote_name": name,
        "description": desc,
        "input_schema": {"type": "object"},
        "requires_approval": approval,
    }


def session(name: str = "calc", sid: str | None = "s-1", tasks: dict | None = None) -> dict:  # type: ignore[type-arg]
    return {
        "mcp_name": name,
        "session_id": sid,
        "transport_kind": "http",
        "metadata": {"taskTools": tasks} if tasks else {},
    }


async def test_record_discovery_returns_what_list_tools_reads_and_writes_its_events(
    pool: Pool,
) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running")
    assert loop.execution_token is not None
    async with connection(pool) as conn:
        rows = await mcp.record_discovery(
            conn,
            loop_id=loop.id,
            execution_token=loop.execution_token,
            sessions=[session(tasks={"slow": "optional"}), session("kb", None)],
            tools=[found("add"), found("slow", approval=True), found("kb__find", server="kb")],
            wire_events=[NewEvent(name="mcp.tools/list", loop_id=loop.id, log="ok")],
        )
        listed = await mcp.list_tools(conn, loop_id=loop.id)
        names = [e.name for e in await events.list_(conn, loop_id=loop.id)]
    assert rows is not None
    assert rows == listed
    assert [(t.name, t.mcp_name, t.session_id, t.task_support) for t in rows] == [
        ("add", "calc", "s-1", None),
        ("slow", "calc", "s-1", "optional"),
        ("kb__find", "kb", None, None),
    ]
    assert names.count("mcp.tools/list") == 1


async def test_record_discovery_again_replaces_the_tools_in_place(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running")
    token = loop.execution_token
    assert token is not None
    async with connection(pool) as conn:
        first = await mcp.record_discovery(
            conn, loop_id=loop.id, execution_token=token, sessions=[session()],
            tools=[found("add"), found("gone")], wire_events=[],
        )  # fmt: skip
        again = await mcp.record_discovery(
            conn, loop_id=loop.id, execution_token=token, sessions=[session(sid="s-2")],
            tools=[found("add", desc="v2"), found("refund", approval=True)], wire_events=[],
        )  # fmt: skip
        listed = await mcp.list_tools(conn, loop_id=loop.id)
    assert first is not None and again is not None
    assert again == listed
    assert [(t.name, t.description, t.requires_approval, t.session_id) for t in again] == [
        ("add", "v2", False, "s-2"),
        ("refund", "", True, "s-2"),
    ]
    assert again[0].id == first[0].id  # updated in place, not deleted and re-inserted


async def test_record_discovery_writes_nothing_when_token_rotated(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="running")
    async with connection(pool) as conn:
        rows = await mcp.record_discovery(
            conn,
            loop_id=loop.id,
            execution_token=uuid.uuid4(),  # a stale generation
            sessions=[session()],
            tools=[found("add")],
            wire_events=[NewEvent(name="mcp.tools/list", loop_id=loop.id)],
        )
        assert rows is None
        assert await mcp.list_tools(conn, loop_id=loop.id) == []
        assert await mcp.list_sessions(conn, loop_id=loop.id) == []
        assert not [
            e for e in await events.list_(conn, loop_id=loop.id) if e.name.startswith("mcp.")
        ]

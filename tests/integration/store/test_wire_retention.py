"""Wire-log retention, on by default (30 days): the janitor prunes llm.request and mcp.*
events past it, in batches, then the stored parts of loops idle that long; messages and
every other event stay, and a loop still running keeps what its recent requests need."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from agentd.db.pool import Pool, connection, transaction
from agentd.engine.janitor import Janitor
from agentd.engine.wire_hints import WireHints
from agentd.llm import body
from agentd.llm.types import WireExchange
from agentd.pipeline import wire
from agentd.settings import Settings
from agentd.store import events
from agentd.store.models import NewEvent
from agentd.testing import factories
from agentd.testing.engine import fast_settings


async def turn(
    pool: Pool, loop_id: uuid.UUID, msgs: list[dict[str, str]], hints: WireHints
) -> None:
    token = uuid.uuid4()
    ex = WireExchange(
        attempt=1,
        method="POST",
        url="http://model",
        request_headers={},
        request_body=None,
        request_wire=body.encode({"model": "m", "messages": list(msgs)}),
    )
    evs = [
        *wire.llm_events([ex], loop_id=loop_id, hints=hints, token=token),
        NewEvent(name="mcp.tools/call", loop_id=loop_id, request_data={"raw": "{}"}),
        NewEvent(name="turn.completed", loop_id=loop_id),
    ]
    async with transaction(pool) as conn:
        await events.insert_many(conn, evs)
    hints.settle(loop_id, token, committed=True)


async def age(pool: Pool, loop_id: uuid.UUID, days: int) -> None:
    async with connection(pool) as conn:
        for table in ("events", "wire_parts", "messages"):
            await conn.execute(
                f"UPDATE {table} SET created_at = created_at - make_interval(days => $2)"
                " WHERE loop_id = $1",
                loop_id,
                days,
            )


def test_the_default_is_thirty_days_and_off_disables_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().wire_log_retention == timedelta(days=30)
    monkeypatch.setenv("AGENTD_WIRE_LOG_RETENTION", "off")
    assert Settings().wire_log_retention is None
    monkeypatch.setenv("AGENTD_WIRE_LOG_RETENTION", "PT1H")
    with pytest.raises(ValueError, match="at least PT2H"):
        Settings()


async def test_janitor_prunes_old_wire_logs_and_idle_loops_parts(pool: Pool) -> None:
    hints = WireHints()
    async with connection(pool) as conn:
        idle = (await factories.loop(conn)).id
        live = (await factories.loop(conn)).id
    msgs = [{"role": "user", "content": "go"}]
    for i in range(5):
        msgs.append({"role": "assistant", "content": f"step {i}"})
        await turn(pool, idle, msgs, hints)
        await turn(pool, live, msgs, hints)
    await age(pool, idle, 40)
    await age(pool, live, 40)
    # The live loop keeps going: its new request references parts stored 40 days ago.
    msgs.append({"role": "assistant", "content": "today"})
    await turn(pool, live, msgs, hints)
    report = await Janitor(fast_settings(janitor_batch_size=3), pool).prune_once()
    assert report.wire_logs == 2 * 5 * 2  # llm.request + mcp.* of the old turns, both loops
    async with connection(pool) as conn:
        left = {
            (r["loop_id"], r["name"]): r["n"]
            for r in await conn.fetch(
                "SELECT loop_id, name, count(*) AS n FROM events GROUP BY 1, 2"
            )
        }
        idle_parts = await conn.fetchval("SELECT count(*) FROM wire_parts WHERE loop_id = $1", idle)
        msgs_left = await conn.fetchval("SELECT count(*) FROM messages")
        (recent,) = [e for e in await events.list_(conn, loop_id=live) if e.name == "llm.request"]
    assert left[(idle, "turn.completed")] == 5 and left[(live, "turn.completed")] == 6
    assert (idle, "llm.request") not in left and left[(live, "llm.request")] == 1
    assert idle_parts == 0 and report.wire_parts > 0
    assert msgs_left == 2  # each loop's user message: messages are never pruned
    assert recent.request_data["body_ref"]["verified"] is True
    assert recent.request_data["body"]["messages"][-1]["content"] == "today"


async def test_off_keeps_everything(pool: Pool) -> None:
    hints = WireHints()
    async with connection(pool) as conn:
        lid = (await factories.loop(conn)).id
    await turn(pool, lid, [{"role": "user", "content": "go"}], hints)
    await age(pool, lid, 400)
    report = await Janitor(fast_settings(wire_log_retention=None), pool).prune_once()
    assert report.wire_logs == report.wire_parts == report.events == 0

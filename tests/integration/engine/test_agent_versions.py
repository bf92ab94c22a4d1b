"""Agent versions: recorded, pinned, claimed only by workers that have them, waited for
(never failed) when no live worker has them, and upgraded at a turn boundary on request."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine import upgrades, versions
from agentd.engine.lifecycle import Lifecycle
from agentd.errors import UpgradeWouldOrphan
from agentd.registry import AgentRegistry
from agentd.store import agent_versions, events, jobs, loops, tool_calls
from agentd.store.models import Loop
from agentd.testing.agents import CalcAgent, calc
from agentd.testing.engine import eventually, fast_settings, loop_row, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as FakeCall


class CalcV2(CalcAgent):
    """The same agent, changed: another prompt (so another version)."""

    system_prompt = "You add numbers, version two."


class CalcPrefixed(CalcAgent):
    """The same agent with its server's tools renamed (a prefix)."""

    mcps = [{"name": "calc", "toolset": calc, "prefix": "c"}]


def reg(cls: type[CalcAgent]) -> AgentRegistry:
    r = AgentRegistry()
    r.register("calc", cls)
    return r


async def event_names(pool: Pool, loop_id: uuid.UUID) -> list[str]:
    async with connection(pool) as conn:
        rows = await events.list_(conn, loop_id=loop_id, after_id=0, limit=1000)
    return [e.name for e in rows]


def script_refund(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[FakeCall("refund", {"amount": 5})]),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="all done")))


def system_prompts(fake: FakeLLM) -> list[str]:
    out = []
    for r in fake.requests:
        body: Any = r.json
        sys_msgs = [m for m in body.get("messages", []) if m.get("role") == "system"]
        out.append(sys_msgs[0]["content"] if sys_msgs else "")
    return out


async def test_versions_are_recorded_once_and_loops_run_the_starting_version(
    pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    r1 = reg(CalcAgent)
    v1 = r1.version_of("calc")
    assert v1 is not None
    assert await versions.record(pool, r1) == [v1]
    assert await versions.record(pool, r1) == []  # idempotent: not new the second time
    async with connection(pool) as conn:
        created = await conn.fetch("SELECT * FROM events WHERE name = 'agent.version_created'")
        row = await agent_versions.get(conn, version_id=v1)
    assert len(created) == 1 and json.loads(created[0]["log"])["version"] == v1
    assert row is not None and row["agent"] == "calc"
    assert row["definition"]["system_prompt"] == "You add numbers."
    fake_llm.reply(content="done")
    async with running_engine(pool, database_url, r1) as engine:
        async with connection(pool) as conn:
            published = await conn.fetchval(
                "SELECT agent_versions FROM worker_versions WHERE worker_id = $1",
                engine.worker_id,
            )
        assert published == [v1]
        loop = await engine.lifecycle.start(
            agent="calc", message="hi", state={"llm": fake_llm.base_url}
        )
        assert loop.agent_version == v1
        await eventually(lambda: _status(pool, loop.id, "completed"))


async def _status(pool: Pool, loop_id: uuid.UUID, status: str) -> bool:
    return (await loop_row(pool, loop_id)).status == status


async def test_claims_skip_loops_of_versions_the_worker_cannot_run(pool: Pool) -> None:
    r1, r2 = reg(CalcAgent), reg(CalcV2)
    await versions.record(pool, r1)
    await versions.record(pool, r2)
    v1, v2 = r1.version_of("calc"), r2.version_of("calc")
    assert v1 and v2 and v1 != v2
    life = Lifecycle(pool, r1, fast_settings())
    loop = await life.start(agent="calc", message="hi", state={"llm": "http://127.0.0.1:9"})
    assert loop.agent_version == v1
    async with connection(pool) as conn:
        skipped = await jobs.claim_llm(
            conn,
            execution_token=uuid.uuid4(),
            worker_id=uuid.uuid4(),
            default_lease=30.0,
            versions=[v2],
        )
        assert skipped is None  # the job is left for a worker with v1
        assert len(await jobs.list_for_loop(conn, loop_id=loop.id)) == 1
        taken = await jobs.claim_llm(
            conn,
            execution_token=uuid.uuid4(),
            worker_id=uuid.uuid4(),
            default_lease=30.0,
            versions=[v1],
        )
    assert taken is not None and taken.loop is not None and taken.loop.id == loop.id


async def test_a_loop_no_live_worker_can_run_waits_and_resumes_when_one_starts(
    pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    """The removed-agent case: workers that lack the loop's version never fail it; it is
    marked waiting_for_version (event, metric) and a worker with the version runs it."""
    r1, r2 = reg(CalcAgent), reg(CalcV2)
    await versions.record(pool, r1)
    v1 = r1.version_of("calc")
    fake_llm.reply(content="done")
    life = Lifecycle(pool, r1, fast_settings())
    loop = await life.start(agent="calc", message="hi", state={"llm": fake_llm.base_url})
    async with running_engine(pool, database_url, r2) as engine:

        async def marked() -> Loop | None:
            await engine.reaper.sweep_once()  # its own sweep may hold the row: poll
            row = await loop_row(pool, loop.id)
            return row if row.status_reason == "waiting_for_version" else None

        row = await eventually(marked)
        assert row.status == "queued"
        assert "loop.waiting_for_version" in await event_names(pool, loop.id)
        async with connection(pool) as conn:
            assert await agent_versions.count_waiting(conn) == [("calc", v1, 1)]
        # Swept again (past any threshold): not rotated, requeued, failed or re-announced.
        async with connection(pool) as conn:
            await conn.execute(
                "UPDATE loops SET updated_at = now() - interval '1 hour' WHERE id = $1", loop.id
            )
        await engine.reaper.sweep_once()
        again = await loop_row(pool, loop.id)
        assert again.execution_token == row.execution_token
        assert again.status == "queued" and again.status_reason == "waiting_for_version"
        assert (await event_names(pool, loop.id)).count("loop.waiting_for_version") == 1
        assert fake_llm.requests == []
        async with running_engine(pool, database_url, r1):
            await eventually(lambda: _status(pool, loop.id, "completed"))
    assert (await loop_row(pool, loop.id)).agent_version == v1


async def test_upgrade_waits_for_the_turn_boundary_then_applies(
    pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    """A loop parked on an approval is upgraded: the pending call still runs on the
    version it was made under (its worker), the next turn runs on the new one."""
    r1, r2 = reg(CalcAgent), reg(CalcV2)
    v1, v2 = r1.version_of("calc"), r2.version_of("calc")
    script_refund(fake_llm)
    async with running_engine(pool, database_url, r1) as e1:
        await versions.record(pool, r2)
        loop = await e1.lifecycle.start(
            agent="calc", message="refund", state={"llm": fake_llm.base_url}
        )

        async def parked() -> Any:
            async with connection(pool) as conn:
                waiting = await tool_calls.list_pending_approval(conn, loop_id=loop.id)
            return waiting[0] if waiting else None

        call = await eventually(parked)
        dry = await upgrades.upgrade_loop(pool, loop.id, to_version=v2, dry_run=True, by="t")
        assert "system_prompt" in dry["diff"]["changed"] and dry["orphaned_calls"] == []
        assert (await loop_row(pool, loop.id)).upgrade_to is None  # a dry run writes nothing
        out = await upgrades.upgrade_loop(pool, loop.id, to_version=v2, dry_run=False, by="t")
        assert out["pending_upgrade"] == v2
        row = await loop_row(pool, loop.id)
        assert row.agent_version == v1 and row.upgrade_to == v2  # not mid-turn
        async with running_engine(pool, database_url, r2):
            await e1.lifecycle.decide(call.id, approve=True, decided_by="ops")
            await eventually(lambda: _status(pool, loop.id, "completed"))
    row = await loop_row(pool, loop.id)
    assert row.agent_version == v2 and row.upgrade_to is None
    names = await event_names(pool, loop.id)
    assert "loop.upgrade_requested" in names and names.count("loop.upgraded") == 1
    # Turn 1 on v1's prompt; the turn after the call on v2's.
    assert system_prompts(fake_llm) == ["You add numbers.", "You add numbers, version two."]
    async with connection(pool) as conn:
        log = await conn.fetchval(
            "SELECT log FROM events WHERE loop_id = $1 AND name = 'loop.upgraded'", loop.id
        )
    assert json.loads(log) == {
        "loop_id": str(loop.id),
        "agent": "calc",
        "from": v1,
        "to": v2,
        "by": "t",
    }


async def test_upgrade_that_would_orphan_a_pending_call_is_refused(
    pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    r1, r2 = reg(CalcAgent), reg(CalcPrefixed)
    v2 = r2.version_of("calc")
    script_refund(fake_llm)
    async with running_engine(pool, database_url, r1) as e1:
        await versions.record(pool, r2)
        loop = await e1.lifecycle.start(
            agent="calc", message="refund", state={"llm": fake_llm.base_url}
        )

        async def parked() -> bool:
            async with connection(pool) as conn:
                return bool(await tool_calls.list_pending_approval(conn, loop_id=loop.id))

        await eventually(parked)
        dry = await upgrades.upgrade_loop(pool, loop.id, to_version=v2, dry_run=True, by="t")
        assert {"from": "refund", "to": "c__refund"} in dry["diff"]["tools"]["renamed"]
        assert dry["orphaned_calls"] == ["refund"]
        with pytest.raises(UpgradeWouldOrphan):
            await upgrades.upgrade_loop(pool, loop.id, to_version=v2, dry_run=False, by="t")
        bulk = await upgrades.upgrade_agent(
            pool, "calc", from_version=None, to_version=v2, dry_run=False, by="t"
        )
    assert bulk["loops"] == [] and bulk["refused"][0]["loop_id"] == str(loop.id)
    row = await loop_row(pool, loop.id)
    assert row.upgrade_to is None and row.status == "waiting"


@pytest.mark.parametrize("listed_before_versions", [False, True])
async def test_upgraded_loop_relists_its_tools_under_the_new_names(
    pool: Pool, database_url: str, fake_llm: FakeLLM, listed_before_versions: bool
) -> None:
    """The prefix rename: tools listed under v1 are listed again under v2's prefix at the
    boundary, so v2's rules see v2's names — also when they were listed before versions
    existed (their sessions name no version)."""
    r1, r2 = reg(CalcAgent), reg(CalcPrefixed)
    v2 = r2.version_of("calc")
    fake_llm.reply(content="done")
    async with running_engine(pool, database_url, r1) as e1:
        await versions.record(pool, r2)
        loop = await e1.lifecycle.start(
            agent="calc", message="hi", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _status(pool, loop.id, "completed"))
    async with connection(pool) as conn:
        before = sorted(
            r["name"]
            for r in await conn.fetch("SELECT name FROM mcp_tools WHERE loop_id = $1", loop.id)
        )
    assert before == ["add", "refund"]
    if listed_before_versions:
        async with connection(pool) as conn:
            await conn.execute(
                "UPDATE mcp_sessions SET metadata = metadata - 'agent_version' WHERE loop_id = $1",
                loop.id,
            )
    await upgrades.upgrade_loop(pool, loop.id, to_version=v2, dry_run=False, by="t")
    async with running_engine(pool, database_url, r2) as e2:
        await e2.lifecycle.append_message(loop.id, "again")
        await eventually(lambda: _status(pool, loop.id, "completed"))
    async with connection(pool) as conn:
        after = sorted(
            r["name"]
            for r in await conn.fetch("SELECT name FROM mcp_tools WHERE loop_id = $1", loop.id)
        )
    assert after == ["c__add", "c__refund"]
    tools = [t["function"]["name"] for t in (fake_llm.requests[-1].json or {}).get("tools", [])]  # type: ignore[union-attr]
    assert sorted(tools) == ["c__add", "c__refund"]


async def test_tools_listed_before_versions_existed_are_kept_without_an_upgrade(
    pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    """A new release alone never re-opens a loop's MCP sessions: a listing that names no
    version stands until the loop is upgraded."""
    r1 = reg(CalcAgent)
    fake_llm.reply(content="done")
    async with running_engine(pool, database_url, r1) as e1:
        loop = await e1.lifecycle.start(
            agent="calc", message="hi", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _status(pool, loop.id, "completed"))
        async with connection(pool) as conn:
            await conn.execute(
                "UPDATE mcp_sessions SET metadata = metadata - 'agent_version' WHERE loop_id = $1",
                loop.id,
            )
            before = await conn.fetch(
                "SELECT id, updated_at FROM mcp_sessions WHERE loop_id = $1", loop.id
            )
        await e1.lifecycle.append_message(loop.id, "again")
        await eventually(lambda: _status(pool, loop.id, "completed"))
    async with connection(pool) as conn:
        after = await conn.fetch(
            "SELECT id, updated_at FROM mcp_sessions WHERE loop_id = $1", loop.id
        )
    assert [dict(r) for r in after] == [dict(r) for r in before]


class LatestCalc(CalcAgent):
    version_policy = "latest"


class LatestCalcV2(LatestCalc):
    system_prompt = "You add numbers, latest."


async def test_a_latest_agent_moves_to_a_new_version_at_its_next_turn(
    pool: Pool, database_url: str, fake_llm: FakeLLM
) -> None:
    r1, r2 = reg(LatestCalc), reg(LatestCalcV2)
    v2 = r2.version_of("calc")
    fake_llm.reply(content="done")
    async with running_engine(pool, database_url, r1) as e1:
        loop = await e1.lifecycle.start(
            agent="calc", message="hi", state={"llm": fake_llm.base_url}
        )
        await eventually(lambda: _status(pool, loop.id, "completed"))
    assert await versions.record(pool, r2) == [v2]  # new: the latest loops move to it
    row = await loop_row(pool, loop.id)
    assert row.upgrade_to == v2 and row.upgrade_by == "version_policy:latest"
    async with running_engine(pool, database_url, r2) as e2:
        await e2.lifecycle.append_message(loop.id, "again")
        await eventually(lambda: _status(pool, loop.id, "completed"))
    assert (await loop_row(pool, loop.id)).agent_version == v2
    assert system_prompts(fake_llm)[-1] == "You add numbers, latest."


async def test_loops_without_a_version_get_one(pool: Pool) -> None:
    """A loop made while no version of its agent was recorded (before migration 0025, or
    by an older release) is adopted by the first version recorded; one made by an older
    release afterwards gets the agent's newest version from the insert trigger."""
    async with connection(pool) as conn:
        legacy = await loops.insert(
            conn, agent="calc", subject=None, state={}, execution_token=uuid.uuid4()
        )
    assert legacy.agent_version is None
    r1, r2 = reg(CalcAgent), reg(CalcV2)
    await versions.record(pool, r1)
    assert (await loop_row(pool, legacy.id)).agent_version == r1.version_of("calc")
    await versions.record(pool, r2)
    async with connection(pool) as conn:
        old_release = await conn.fetchrow(  # what an older release's loop_insert writes
            "INSERT INTO loops (agent, subject, state, status, execution_token) "
            "VALUES ('calc', NULL, '{}', 'queued', gen_random_uuid()) RETURNING agent_version"
        )
    assert old_release["agent_version"] == r2.version_of("calc")


async def test_version_created_and_loop_upgraded_are_webhooks(pool: Pool) -> None:
    async with connection(pool) as conn:
        await conn.execute(
            "INSERT INTO webhook_endpoints (url, events, secret_env) "
            "VALUES ('http://127.0.0.1:9/hook', '{agent.version_created,loop.upgraded}', 'S')"
        )
    r1, r2 = reg(CalcAgent), reg(CalcV2)
    v1, v2 = r1.version_of("calc"), r2.version_of("calc")
    await versions.record(pool, r1)
    await versions.record(pool, r1)  # not new: no second delivery
    await versions.record(pool, r2)
    life = Lifecycle(pool, r1, fast_settings())
    loop = await life.start(agent="calc", message="hi", state={"llm": "http://127.0.0.1:9"})
    await upgrades.upgrade_loop(pool, loop.id, to_version=v2, dry_run=False, by="ops")
    async with connection(pool) as conn, conn.transaction():
        # Fenced: another generation's worker cannot apply it.
        stale = await versions.apply_upgrade(conn, loop_id=loop.id, execution_token=uuid.uuid4())
        applied = await versions.apply_upgrade(
            conn, loop_id=loop.id, execution_token=loop.execution_token
        )
    assert applied == {"loop_id": str(loop.id), "agent": "calc", "from": v1, "to": v2, "by": "ops"}
    assert stale is None
    async with connection(pool) as conn:
        rows = await conn.fetch(
            "SELECT event_type, loop_id, payload FROM webhook_deliveries ORDER BY id"
        )
    assert [(r["event_type"], r["payload"]["data"].get("version")) for r in rows] == [
        ("agent.version_created", v1),
        ("agent.version_created", v2),
        ("loop.upgraded", None),
    ]
    assert rows[2]["loop_id"] == loop.id and rows[2]["payload"]["data"]["to"] == v2

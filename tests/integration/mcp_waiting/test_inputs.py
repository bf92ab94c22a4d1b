"""MCP input requests (elicitation) park the call durably until a person answers."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from waiting_world import WHO, World, build_elicit, serve

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.errors import AlreadyDecided, InputInvalid
from agentd.mcp.outcomes import ELICITATION_UNSUPPORTED
from agentd.mcp.port import idempotency_key
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.store import jobs, loops, messages, tool_calls
from agentd.store.models import ToolCall
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from agentd.testing.fake_llm import ToolCall as FakeCall


def script(fake: FakeLLM, *calls: FakeCall) -> None:
    fake.add(Rule(match=lambda last: last.role == "user", reply=Reply(tool_calls=list(calls))))
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))


async def start(client: httpx.AsyncClient, fake: FakeLLM, world: World) -> str:
    r = await client.post(
        "/v1/loops",
        json={"agent": "world", "message": "go", "state": {"llm": fake.base_url, "mcp": world.url}},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def inputs(client: httpx.AsyncClient, lid: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/loops/{lid}/inputs")
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


async def status(pool: Pool, lid: str) -> str:
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=uuid.UUID(lid))
    assert row is not None
    return row.status


async def is_(pool: Pool, lid: str, wanted: str) -> bool:
    return await status(pool, lid) == wanted


async def call_row(pool: Pool, tool_call_id: int) -> ToolCall:
    async with connection(pool) as conn:
        row = await tool_calls.get(conn, tool_call_id=tool_call_id)
    assert row is not None
    return row


async def tool_results(pool: Pool, lid: str) -> list[str]:
    async with connection(pool) as conn:
        rows = await messages.list_(conn, loop_id=uuid.UUID(lid))
    return [m.content or "" for m in rows if m.role == "tool"]


async def test_elicitation_parks_the_call_until_a_person_answers(
    client: httpx.AsyncClient, pool: Pool, database_url: str, registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:  # fmt: skip
    script(fake_llm, FakeCall("greet", {"greeting": "Hello"}))
    async with (
        serve(build_elicit(world := World()), world),
        running_engine(pool, database_url, registry) as engine,
    ):
        lid = await start(client, fake_llm, world)
        (pending,) = await eventually(lambda: inputs(client, lid))
        assert pending["name"] == "greet" and pending["round"] == 1
        (asked,) = pending["requests"]
        assert asked["key"] == "who" and asked["mode"] == "form"
        assert asked["message"] == "Whom should I greet?" and asked["requested_schema"] == WHO

        # Parked: loop waiting, call waiting, no lease, no job, no worker, nothing to reap.
        assert await status(pool, lid) == "waiting"
        call = await call_row(pool, pending["tool_call_id"])
        assert call.status == "waiting" and call.input_status == "pending"
        assert call.lease_token is None and call.leased_until is None and call.executed_at is None
        async with connection(pool) as conn:
            assert await jobs.list_for_loop(conn, loop_id=uuid.UUID(lid)) == []
        assert engine.worker.in_flight == 0
        report = await engine.reaper.sweep_once()
        assert report.stalled_tool_calls == 0 and report.dead_worker_tool_calls == 0

        # A wrong answer is refused, naming the field; nothing is recorded.
        url = f"/v1/tool-calls/{call.id}/input"
        bad = await client.post(url, json={"action": "accept", "content": {"age": "old"}})
        assert bad.status_code == 422, bad.text
        fields = {e["field"] for e in bad.json()["errors"]}
        assert fields == {"content.name", "content.age"}
        assert "content.name" in bad.json()["detail"]
        assert (await call_row(pool, call.id)).input_status == "pending"

        ok = await client.post(url, json={"action": "accept", "content": {"name": "Ann"}})
        assert ok.status_code == 200, ok.text
        assert ok.json()["input_status"] == "answered" and ok.json()["input_rounds"] == 1
        again = await client.post(url, json={"action": "accept", "content": {"name": "Ann"}})
        assert again.status_code == 200  # the same answer again is harmless
        await eventually(lambda: is_(pool, lid, "completed"))
        late = await client.post(url, json={"action": "accept", "content": {"name": "Bob"}})
        assert late.status_code == 409, late.text

    assert await tool_results(pool, lid) == ["Hello, Ann!"]
    assert fake_llm.requests[-1].json["messages"][-1]["content"] == "Hello, Ann!"
    done = await call_row(pool, call.id)
    assert done.is_success is True and done.input_rounds == 1
    # Both rounds carried the same idempotency key, and the retry carried the answer.
    assert world.keys("greet") == [idempotency_key(call.id)] * 2
    retry = world.calls[-1]
    assert retry["inputResponses"] == {"who": {"action": "accept", "content": {"name": "Ann"}}}
    assert await inputs(client, lid) == []


async def test_declining_gives_the_tool_the_decline(
    client: httpx.AsyncClient, pool: Pool, database_url: str, registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:  # fmt: skip
    script(fake_llm, FakeCall("greet", {"greeting": "Hi"}))
    async with (
        serve(build_elicit(world := World()), world),
        running_engine(pool, database_url, registry),
    ):
        lid = await start(client, fake_llm, world)
        (pending,) = await eventually(lambda: inputs(client, lid))
        url = f"/v1/tool-calls/{pending['tool_call_id']}/input"
        with_content = await client.post(url, json={"action": "decline", "content": {"x": 1}})
        assert with_content.status_code == 422
        assert with_content.json()["errors"][0]["field"] == "content"
        r = await client.post(url, json={"action": "decline"})
        assert r.status_code == 200, r.text
        await eventually(lambda: is_(pool, lid, "completed"))
    assert await tool_results(pool, lid) == ["nobody to greet (the user chose decline)"]
    assert world.calls[-1]["inputResponses"] == {"who": {"action": "decline"}}


async def test_several_rounds_each_park_and_keep_the_idempotency_key(
    client: httpx.AsyncClient, pool: Pool, database_url: str, registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:  # fmt: skip
    script(fake_llm, FakeCall("survey", {}))
    async with (
        serve(build_elicit(world := World()), world),
        running_engine(pool, database_url, registry),
    ):
        lid = await start(client, fake_llm, world)
        (first,) = await eventually(lambda: inputs(client, lid))
        call_id = first["tool_call_id"]
        url = f"/v1/tool-calls/{call_id}/input"
        r = await client.post(url, json={"action": "accept", "content": {"name": "Ann"}})
        assert r.status_code == 200, r.text

        async def second_round() -> list[dict[str, Any]]:
            return [i for i in await inputs(client, lid) if i["round"] == 2]

        (second,) = await eventually(second_round)
        assert second["requests"][0]["key"] == "color"
        assert second["requests"][0]["message"] == "Ann, your favourite colour?"
        assert await status(pool, lid) == "waiting"
        teal = {"color": {"action": "accept", "content": {"color": "teal"}}}
        r = await client.post(url, json={"responses": teal})
        assert r.status_code == 200, r.text
        await eventually(lambda: is_(pool, lid, "completed"))
    assert await tool_results(pool, lid) == ["Ann likes teal"]
    assert (await call_row(pool, call_id)).input_rounds == 2
    assert world.keys("survey") == [idempotency_key(call_id)] * 3


async def test_a_parked_call_survives_a_worker_restart(
    pool: Pool, database_url: str, registry: AgentRegistry, settings: Settings,
    fake_llm: FakeLLM,
) -> None:  # fmt: skip
    script(fake_llm, FakeCall("greet", {"greeting": "Welcome"}))
    async with serve(build_elicit(world := World()), world):
        async with running_engine(pool, database_url, registry) as engine:
            loop = await engine.lifecycle.start(
                agent="world", message="go", state={"llm": fake_llm.base_url, "mcp": world.url}
            )

            async def parked() -> list[ToolCall]:
                async with connection(pool) as conn:
                    return await tool_calls.list_pending_input(conn, loop_id=loop.id)

            (call,) = await eventually(parked)
        # No engine runs: the answer is recorded and the call re-enqueued durably.
        lifecycle = Lifecycle(pool, registry, settings)
        with pytest.raises(InputInvalid):
            await lifecycle.answer_input(call.id, action="accept", content={})
        await lifecycle.answer_input(call.id, action="accept", content={"name": "Zoe"})
        with pytest.raises(AlreadyDecided):
            await lifecycle.answer_input(call.id, action="cancel")
        async with connection(pool) as conn:
            (job,) = await jobs.list_for_loop(conn, loop_id=loop.id)
        assert job["tool_call_id"] == call.id
        async with running_engine(pool, database_url, registry):
            await eventually(lambda: is_(pool, str(loop.id), "completed"))
    assert await tool_results(pool, str(loop.id)) == ["Welcome, Zoe!"]


async def test_handshake_era_elicitation_fails_the_tool_clearly(
    client: httpx.AsyncClient, pool: Pool, database_url: str, registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:  # fmt: skip
    script(fake_llm, FakeCall("greet", {"greeting": "Hello"}))
    world = World()
    async with (
        serve(build_elicit(world, handshake=True), world, sse=True),
        running_engine(pool, database_url, registry),
    ):
        lid = await start(client, fake_llm, world)
        await eventually(lambda: is_(pool, lid, "completed"))
    (result,) = await tool_results(pool, lid)
    assert result.startswith(ELICITATION_UNSUPPORTED), result
    assert "elicitation/create" in result and "timed out" not in result
    assert "initialize" in world.methods  # it really was the handshake era
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=uuid.UUID(lid))
    assert call.is_success is False and call.input_status is None
    assert fake_llm.requests[-1].json["messages"][-1]["content"] == result


async def test_answering_what_was_not_asked(
    client: httpx.AsyncClient, pool: Pool, database_url: str, registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:  # fmt: skip
    script(fake_llm, FakeCall("echo", {"text": "plain"}))
    async with (
        serve(build_elicit(world := World()), world),
        running_engine(pool, database_url, registry),
    ):
        lid = await start(client, fake_llm, world)
        await eventually(lambda: is_(pool, lid, "completed"))
    async with connection(pool) as conn:
        (call,) = await tool_calls.list_for_loop(conn, loop_id=uuid.UUID(lid))
    r = await client.post(f"/v1/tool-calls/{call.id}/input", json={"action": "cancel"})
    assert r.status_code == 409 and r.json()["type"].endswith("/already-decided")
    missing = await client.post("/v1/tool-calls/999999/input", json={"action": "cancel"})
    assert missing.status_code == 404
    nothing = await client.post(f"/v1/tool-calls/{call.id}/input", json={})
    assert nothing.status_code in (409, 422)
    assert (await client.get(f"/v1/loops/{uuid.uuid4()}/inputs")).status_code == 404

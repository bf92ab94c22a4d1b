"""Fork a loop at a message (a paused copy) and regenerate from one (later messages are
superseded, kept on record); both through the API and the admin, never disturbing the
source loop, and regenerate fenced against a running worker."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from long_loops_kit import history, in_status, loop_row

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.store import jobs
from agentd.testing.agents import CALLS
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


def script(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user" and last.text == "add 1+2",
            reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})]),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="It is 3.")))
    fake.add(Rule(match=lambda last: last.role == "user", reply=Reply(content="Anything else?")))


def sent(fake: FakeLLM, i: int) -> list[dict[str, Any]]:
    return fake.requests[i].json["messages"]  # type: ignore[no-any-return]


async def completed_loop(engine: Any, pool: Pool, fake: FakeLLM) -> uuid.UUID:
    loop = await engine.lifecycle.start(
        agent="calc", message="add 1+2", state={"llm": fake.base_url}
    )
    await eventually(in_status(pool, loop.id, "completed"))
    return loop.id  # type: ignore[no-any-return]


async def test_fork_copies_history_with_tool_calls_and_runs_from_there(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    script(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        source = await completed_loop(engine, pool, fake_llm)
        before, source_calls = await history(pool, source)
        user, asked, result, _answer = before
        r = await client.post(f"/v1/loops/{source}/fork", json={"message_id": asked.id})
        assert r.status_code == 201, r.text
        fork = r.json()
        assert r.headers["location"] == f"/v1/loops/{fork['id']}"
        assert fork["status"] == "paused" and fork["status_reason"] == "forked"
        assert fork["forked_from"] == {"loop_id": str(source), "message_id": asked.id}
        assert fork["step_count"] == 1
        fork_id = uuid.UUID(fork["id"])
        copied, calls = await history(pool, fork_id)
        assert [(m.role, m.content) for m in copied] == [
            ("user", "add 1+2"),
            ("assistant", ""),
            ("tool", "3"),  # the message's tool results come with it
        ]
        assert [m.forked_from_message_id for m in copied] == [user.id, asked.id, result.id]
        (call,) = calls
        assert call.message_id == copied[1].id and call.response_message_id == copied[2].id
        assert copied[2].tool_call_id == call.id and call.result == "3"
        assert call.provider_call_id == source_calls[0].provider_call_id
        async with connection(pool) as conn:
            assert await jobs.list_for_loop(conn, loop_id=fork_id) == []

        await client.post(f"/v1/loops/{fork_id}/resume")
        await eventually(in_status(pool, fork_id, "completed"))
    # The fork's one request is the source's second, verbatim: same history, same calls.
    assert len(fake_llm.requests) == 3
    assert sent(fake_llm, 2) == sent(fake_llm, 1)
    assert len(CALLS) == 1  # the copied result was not recomputed
    after, _ = await history(pool, source)
    assert after == before  # the source loop is untouched
    assert (await loop_row(pool, source)).status == "completed"


async def test_regenerate_supersedes_later_messages_and_reruns_from_the_message(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    script(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop_id = await completed_loop(engine, pool, fake_llm)
        (user, *_), _ = await history(pool, loop_id)
        r = await client.post(f"/v1/loops/{loop_id}/regenerate", json={"message_id": user.id})
        assert r.status_code == 200, r.text
        assert r.json()["status"] in ("queued", "running", "completed")
        await eventually(in_status(pool, loop_id, "completed"))
    assert len(fake_llm.requests) == 4
    assert sent(fake_llm, 2) == sent(fake_llm, 0)  # the same prompt as the first turn
    items = (await client.get(f"/v1/loops/{loop_id}/messages")).json()["items"]
    assert [(m["role"], m["content"], m["superseded"]) for m in items] == [
        ("user", "add 1+2", False),
        ("assistant", "", True),
        ("tool", "3", True),
        ("assistant", "It is 3.", True),
        ("assistant", "", False),
        ("tool", "3", False),
        ("assistant", "It is 3.", False),
    ]
    # The last prompt holds none of the superseded messages.
    assert [m["role"] for m in sent(fake_llm, 3)] == ["system", "user", "assistant", "tool"]
    row = await loop_row(pool, loop_id)
    assert row.step_count == 4  # steps keep counting: superseded answers keep theirs


async def test_regenerate_of_a_running_loop_revokes_the_turn_in_flight(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    # Streamed 4 characters every 50 ms. Words, not one 400-character run: a run of base64
    # characters is held back while any secret is known (redact.stream_prefix), and other
    # tests in this process may have made one known.
    slow = "yes " * 100
    fake_llm.add(Rule(reply=Reply(content=slow, chunk_size=4, chunk_delay=0.05), times=1))
    fake_llm.add(Rule(reply=Reply(content="fresh answer")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url, "stream": True}
        )

        async def streaming() -> bool:
            async with connection(pool) as conn:
                rows = await conn.fetch(
                    "SELECT 1 FROM messages WHERE loop_id = $1 AND status = 'processing' "
                    "AND content <> ''",
                    loop.id,
                )
            return bool(rows)

        await eventually(streaming)
        stale = await loop_row(pool, loop.id)
        (user,), _ = await history(pool, loop.id)
        row = await engine.lifecycle.regenerate(loop.id, user.id)
        assert row.execution_token not in (None, stale.execution_token)
        await fake_llm.wait_for_disconnects(1)
        done = await eventually(in_status(pool, loop.id, "completed"))
    rows, _ = await history(pool, loop.id)
    assert [(m.role, m.content) for m in rows] == [("user", "go"), ("assistant", "fresh answer")]
    assert done.step_count == 1
    assert len(fake_llm.requests) == 2


async def test_regenerate_cancels_superseded_tool_calls_waiting_for_approval(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("refund", {"amount": 5})]),
            times=1,
        )
    )
    fake_llm.add(Rule(reply=Reply(content="no refund then")))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="refund me", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "waiting"))
        (user, *_), _ = await history(pool, loop.id)
        await engine.lifecycle.regenerate(loop.id, user.id)
        await eventually(in_status(pool, loop.id, "completed"))
    rows, calls = await history(pool, loop.id)
    (call,) = calls
    assert call.status == "cancelled" and call.approval_status == "denied"
    assert call.decision_reason == "superseded by regenerate"
    assert CALLS == []  # the refund never ran
    assert [(m.role, m.superseded_at is not None) for m in rows] == [
        ("user", False),
        ("assistant", True),
        ("tool", True),
        ("assistant", False),
    ]
    assert rows[-1].content == "no refund then"


async def test_fork_and_regenerate_refuse_messages_they_cannot_use(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
) -> None:
    script(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        first = await completed_loop(engine, pool, fake_llm)
        other = await completed_loop(engine, pool, fake_llm)
    rows, _ = await history(pool, first)
    (foreign, *_), _ = await history(pool, other)
    answer = rows[-1]
    for action in ("fork", "regenerate"):
        r = await client.post(f"/v1/loops/{first}/{action}", json={"message_id": foreign.id})
        assert r.status_code == 404, r.text
        r = await client.post(f"/v1/loops/{uuid.uuid4()}/{action}", json={"message_id": 1})
        assert r.status_code == 404, r.text
    r = await client.post(f"/v1/loops/{first}/regenerate", json={"message_id": answer.id})
    assert r.status_code == 400 and "regenerate from the message before it" in r.text
    assert (await history(pool, first))[0] == rows


async def test_admin_forks_and_regenerates_at_a_message(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    admin: httpx.AsyncClient,
) -> None:
    script(fake_llm)
    async with running_engine(pool, database_url, registry) as engine:
        loop_id = await completed_loop(engine, pool, fake_llm)
        rows, _ = await history(pool, loop_id)
        page = (await admin.get(f"/admin/loops/{loop_id}")).text
        assert f'data-action="fork-{rows[1].id}"' in page
        assert f'data-action="regenerate-{rows[-1].id}"' in page  # "regenerate this reply"
        assert f"/messages/{rows[-2].id}/regenerate" in page  # ... posts the one before it
        csrf = {"csrf": admin.headers["x-csrf"]}
        r = await admin.post(f"/admin/loops/{loop_id}/messages/{rows[1].id}/fork", data=csrf)
        assert r.status_code == 303
        fork_id = uuid.UUID(r.headers["location"].rsplit("/", 1)[1])
        assert (await loop_row(pool, fork_id)).forked_from_loop_id == loop_id
        fork_page = (await admin.get(f"/admin/loops/{fork_id}")).text
        assert "forked from" in fork_page

        r = await admin.post(f"/admin/loops/{loop_id}/messages/{rows[-2].id}/regenerate", data=csrf)
        assert r.status_code == 303
        await eventually(lambda: _answers(pool, loop_id, 2))
        page = (await admin.get(f"/admin/loops/{loop_id}")).text
        assert "superseded" in page


async def _answers(pool: Pool, loop_id: uuid.UUID, n: int) -> bool:
    rows, _ = await history(pool, loop_id)
    done = await loop_row(pool, loop_id)
    return done.status == "completed" and sum(m.content == "It is 3." for m in rows) == n

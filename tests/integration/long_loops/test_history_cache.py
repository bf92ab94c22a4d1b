"""A chained turn reads only the messages after the transcript its worker holds
(engine/history_cache.py, agentd_turn_prefetch_after): every prompt it builds is the one a
full read would build — through tool rounds, compaction, regenerate, continue and forks —
and the rows it reads stay O(new rows) however long the loop is."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from long_loops_kit import CompactingAgent, history, in_status

from agentd.db.pool import Pool, connection
from agentd.engine import transcript, turn_start
from agentd.engine.history_cache import HistoryCache
from agentd.engine.runtime import Runtime
from agentd.llm.dialects import base as dialects
from agentd.llm.dialects import open_ai
from agentd.pipeline.llm import prompt
from agentd.pipeline.llm.network_calling import NetworkCalling
from agentd.registry import AgentRegistry
from agentd.store import jobs
from agentd.store.models import Message as MessageRow
from agentd.testing import factories
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, LastMessage, Reply, Rule, ToolCall


def rounds(fake: FakeLLM, n: int) -> None:
    """Each user message starts n rounds of one `add` call, then a final answer."""
    count = {"calls": 0}

    def reply(last: LastMessage) -> Reply:
        if last.role == "user":
            count["calls"] = 0
        if count["calls"] < n:
            count["calls"] += 1
            return Reply(tool_calls=[ToolCall("add", {"a": count["calls"], "b": 1})])
        return Reply(content=f"done after {n}")

    fake.add(Rule(match=None, reply=reply))


@pytest.fixture
def oracle(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Checks every merged (delta) history against a full read of the same loop, and counts
    the rows each delta read returned."""
    seen: dict[str, Any] = {"deltas": [], "mismatches": [], "full": 0}
    original = turn_start.whole_history

    async def checked(
        runtime: Runtime, history: HistoryCache, loop: Any, pre: jobs.TurnPrefetch
    ) -> jobs.TurnPrefetch:
        if pre.after is None:
            seen["full"] += 1
            return await original(runtime, history, loop, pre)
        seen["deltas"].append(len(pre.messages))
        merged = await original(runtime, history, loop, pre)
        from agentd.store import messages, tool_calls

        async with connection(runtime.pool) as conn:
            rows = await messages.list_(conn, loop_id=loop.id)
            calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
        # With the worker's render memo and the agent's system prompt, as NetworkCalling
        # builds it (so the memo's extension of the last prompt is what is checked).
        system = runtime.registry.get(loop.agent).system_prompt
        want = prompt.history(system, rows, calls)
        got = prompt.history(system, merged.messages, merged.tool_calls, memo=merged.rendered)
        if want != got:
            seen["mismatches"].append((loop.id, len(want), len(got)))
        return merged

    monkeypatch.setattr(turn_start, "whole_history", checked)
    yield seen


async def test_chained_turns_read_only_new_rows_and_build_the_full_prompt(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM, oracle: Any
) -> None:
    rounds(fake_llm, 30)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"), within=60)
        cache: HistoryCache = engine.worker.history
    assert oracle["mismatches"] == []
    # 31 model turns: the first from the claim (full), the others chained, each reading
    # just the answer and the tool result that came after the rows held.
    assert len(oracle["deltas"]) >= 25, oracle
    assert max(oracle["deltas"]) <= 2
    assert cache.hits >= 25
    # And every prompt extended the previous one by exactly those two messages.
    sent = [r.json["messages"] for r in fake_llm.requests]
    for before, after in itertools.pairwise(sent):
        assert after[: len(before)] == before and len(after) == len(before) + 2


async def test_regenerate_continue_and_fork_read_in_full_then_chain_again(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    client: httpx.AsyncClient,
    oracle: Any,
) -> None:
    rounds(fake_llm, 4)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"))
        rows, _ = await history(pool, loop.id)
        asked = [r for r in rows if r.role == "assistant"][1]
        # Regenerate from the second answer: later rows are superseded (an UPDATE of rows
        # a worker holds); the token rotates, so the next turn reads in full.
        r = await client.post(f"/v1/loops/{loop.id}/regenerate", json={"message_id": asked.id})
        assert r.status_code == 200, r.text
        await eventually(in_status(pool, loop.id, "completed"))
        r = await client.post(f"/v1/loops/{loop.id}/messages", json={"content": "again"})
        assert r.status_code in (200, 201, 202), r.text
        await eventually(in_status(pool, loop.id, "completed"))
        r = await client.post(f"/v1/loops/{loop.id}/fork", json={"message_id": asked.id})
        assert r.status_code == 201, r.text
        fork = uuid.UUID(r.json()["id"])
        r = await client.post(f"/v1/loops/{fork}/resume", json={})
        assert r.status_code in (200, 202), r.text
        await eventually(in_status(pool, fork, "completed"))
    assert oracle["mismatches"] == []
    assert oracle["deltas"] and oracle["full"] >= 4
    # No prompt ever showed a superseded row: each one is what a full read builds.
    async with connection(pool) as conn:
        superseded = await conn.fetchval(
            "SELECT count(*) FROM messages WHERE loop_id = $1 AND superseded_at IS NOT NULL",
            loop.id,
        )
    assert superseded > 0


async def test_compaction_mid_loop(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM, oracle: Any
) -> None:
    count = {"n": 0}

    def reply(last: LastMessage) -> Reply:
        if last.role == "user" and last.text == CompactingAgent.compaction_prompt:
            return Reply(content=f"SUMMARY after {count['n']}", usage=(100, 10))
        count["n"] += 1
        if count["n"] > 12:
            return Reply(content="done", usage=(100, 10))
        # Every fourth answer reports a prompt past the 500-token threshold: compact.
        used = 600 if count["n"] % 4 == 0 else 100
        return Reply(tool_calls=[ToolCall("add", {"a": count["n"], "b": 1})], usage=(used, 10))

    fake_llm.add(Rule(match=None, reply=reply))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="compacting", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"), within=60)
    rows, _ = await history(pool, loop.id)
    assert any(r.summary_through is not None for r in rows)
    assert oracle["mismatches"] == []
    assert oracle["deltas"]


def test_cache_is_a_hint_keyed_by_generation_and_last_id() -> None:
    """Another worker's turn, a lifecycle action, a restart: the generation differs, so no
    delta is asked for; a delta at another last id is refused (read in full)."""
    cache = HistoryCache(max_loops=2)
    loop, token = uuid.uuid4(), uuid.uuid4()
    cache.record(loop, token, [], [])
    assert cache.after(loop, token) == 0
    assert cache.after(loop, uuid.uuid4()) is None  # the loop moved on: read in full
    assert cache.merge(loop, 5, [], []) is None
    for _ in range(2):  # evicted past max_loops
        cache.record(uuid.uuid4(), uuid.uuid4(), [], [])
    assert cache.after(loop, token) is None


def test_tools_are_held_with_the_transcript_for_their_generation_only() -> None:
    cache = HistoryCache(max_loops=2)
    loop, token = uuid.uuid4(), uuid.uuid4()
    cache.hold_tools(loop, token, [], [{"mcp_name": "web"}])  # no transcript held: ignored
    assert not cache.tools_held(loop, token) and cache.held_tools(loop) is None
    cache.record(loop, token, [], [])
    cache.hold_tools(loop, token, [], [{"mcp_name": "web"}])
    assert cache.tools_held(loop, token)
    assert not cache.tools_held(loop, uuid.uuid4())  # another generation: read them
    assert cache.held_tools(loop) == ([], [{"mcp_name": "web"}])
    for _ in range(2):  # evicted past max_loops, tools with the transcript
        cache.record(uuid.uuid4(), uuid.uuid4(), [], [])
    assert not cache.tools_held(loop, token) and cache.held_tools(loop) is None
    cache.record(loop, token, [], [])
    cache.hold_tools(loop, token, [], [])
    cache.drop(loop)
    assert cache.held_tools(loop) is None


def test_render_memo_reuses_only_the_same_row_and_call_objects() -> None:
    import dataclasses
    from datetime import UTC, datetime

    from agentd.store.models import ToolCall as CallRow

    now = datetime.now(UTC)
    lid = uuid.uuid4()
    base = dict(loop_id=lid, reasoning=None, hidden=False, status="completed", step=None,
                execution_token=None, metadata={}, tokens_prompt=None, tokens_completion=None,
                tokens_cached=None, ttft=None, duration=None, finish_reason=None,
                error_message=None, created_at=now, updated_at=now)  # fmt: skip
    asked = MessageRow(id=1, role="assistant", content="", tool_call_id=None, **base)
    answer = MessageRow(id=2, role="tool", content="3", tool_call_id=7, **base)
    fields = {f: None for f in CallRow.__dataclass_fields__}
    call = CallRow(**{**fields, "id": 7, "loop_id": lid, "message_id": 1, "position": 0,
                      "provider_call_id": "c7", "name": "add", "arguments": {"a": 1},
                      "metadata": {}, "is_success": True})  # fmt: skip
    memo: transcript.Rendered = {}
    first = prompt.history("s", [asked, answer], [call], memo=memo)
    again = prompt.history("s", [asked, answer], [call], memo=memo)
    assert again[1] is first[1] and again[2] is first[2]  # reused
    failed = dataclasses.replace(call, is_success=False)  # a newer version of the call
    third = prompt.history("s", [asked, answer], [failed], memo=memo)
    assert third[2] is not first[2] and third[2].is_error
    assert third == prompt.history("s", [asked, answer], [failed])  # as without a memo


async def test_delta_read_returns_only_new_rows_of_a_long_loop(pool: Pool) -> None:
    """The SQL itself: on a 600-message loop, a delta read after the second-last message
    returns one row and its tool call; a full read returns them all."""
    async with connection(pool) as conn:
        loop = await factories.loop(conn, status="running")
        await conn.execute(
            "INSERT INTO messages (loop_id, role, content)"
            " SELECT $1, CASE WHEN g % 2 = 0 THEN 'assistant' ELSE 'user' END, 'm' || g"
            " FROM generate_series(1, 599) g",
            loop.id,
        )
        call_msg = await conn.fetchval(
            "SELECT max(id) FROM messages WHERE loop_id = $1 AND role = 'assistant'", loop.id
        )
        row = await conn.fetchrow("SELECT * FROM messages WHERE id = $1", call_msg)
        await factories.tool_call(conn, loop, message=MessageRow.from_record(row))
        ids = [
            r["id"]
            for r in await conn.fetch(
                "SELECT id FROM messages WHERE loop_id = $1 ORDER BY id", loop.id
            )
        ]
        assert len(ids) == 600
        q = (
            "SELECT json_array_length(history) AS m, json_array_length(history_calls) AS c,"
            " after_id FROM agentd_turn_prefetch_after($1, $2)"
        )
        delta = await conn.fetchrow(q, loop.id, ids[-3])
        full = await conn.fetchrow(q, loop.id, None)
    assert (delta["m"], delta["after_id"]) == (2, ids[-3])
    assert delta["c"] == (1 if call_msg in ids[-2:] else 0)
    assert full["m"] == 600 and full["after_id"] is None


class WindowedAgent(CalcAgent):
    """Compaction on (it measures every prompt), never reached."""

    context_window = 10**9


async def test_a_compacting_agents_chained_prompts_extend_the_last_one(
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    oracle: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compaction builds the prompt (to measure it) with the worker's memo, as
    NetworkCalling would: each chained turn extends the last prompt, and the dialect
    resumes the last request's rendering, instead of rendering every row again."""
    registry.register("windowed", WindowedAgent)
    extended: list[bool] = []
    resumed: list[bool] = []
    extends, resume = prompt._extends, dialects.resume

    def counting_extends(*a: Any) -> bool:
        extended.append(extends(*a))
        return extended[-1]

    def counting_resume(*a: Any) -> Any:
        found = resume(*a)
        resumed.append(found is not None)
        return found

    monkeypatch.setattr(prompt, "_extends", counting_extends)
    monkeypatch.setattr(open_ai, "resume", counting_resume)
    rounds(fake_llm, 30)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="windowed", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"), within=60)
    assert oracle["mismatches"] == []
    assert extended.count(True) >= 25 and resumed.count(True) >= 25, (extended, resumed)
    sent = [r.json["messages"] for r in fake_llm.requests]
    for before, after in itertools.pairwise(sent):
        assert after[: len(before)] == before and len(after) == len(before) + 2


class Shout:
    """A host middleware before NetworkCalling: builds the prompt as NetworkCalling would
    (with the worker's memo) and replaces — never edits — the first user message."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        rows, calls = await ctx.prompt_inputs()
        memo = getattr(ctx.prefetch, "rendered", None)
        history = prompt.history(ctx.agent.system_prompt, rows, calls, memo=memo)
        i = next(i for i, m in enumerate(history) if m.role == "user")
        history[i] = dataclasses.replace(history[i], content=f"{history[i].content}!".upper())
        ctx.history = history
        await self.app(ctx)


class ShoutingAgent(CalcAgent):
    @classmethod
    def configure_llm_middlewares(cls, builder: Any) -> None:
        builder.insert_before(NetworkCalling, Shout)


async def test_a_middleware_replacing_a_prompt_message_changes_that_request_only(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    """The memo's messages are shared from turn to turn: a middleware that replaces one in
    its ctx.history sends its version every turn it does so, and the memo and the dialect's
    rendering of the loop's own messages are untouched by it."""
    registry.register("shouting", ShoutingAgent)
    rounds(fake_llm, 10)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="shouting", message="go", state={"llm": fake_llm.base_url}
        )
        await eventually(in_status(pool, loop.id, "completed"), within=60)
        memo = engine.worker.history.rendered(loop.id)
    sent = [r.json["messages"] for r in fake_llm.requests]
    assert len(sent) == 11
    assert all(m[1] == {"role": "user", "content": "GO!"} for m in sent)
    for before, after in itertools.pairwise(sent):
        assert after[: len(before)] == before and len(after) == len(before) + 2
    assert memo is not None and memo.last is not None
    assert [m.content for m in memo.last.out if m.role == "user"] == ["go"]

"""Every completed loop writes one `loop.completed` event, whichever path completed it.

Caught: the finalize of a model's last turn (plain, streamed, or chained after tool calls
in the same worker) completed the loop without an event, so the fleet feed heard of
failed, paused and stopped loops but never of completed ones (0 of 50).
"""

from __future__ import annotations

from typing import Any

from agentd.db.pool import Pool, connection
from agentd.pipeline.llm.network_calling import NetworkCalling
from agentd.store import events, loops
from agentd.testing import agents
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall


class HostCompletes(agents.CalcAgent):
    """Completes the loop from a middleware once tool results are in (no LLM call)."""

    @classmethod
    def configure_llm_middlewares(cls, builder: Any) -> None:
        builder.insert_before(NetworkCalling, _DoneAfterTools)


class _DoneAfterTools:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, ctx: Any) -> None:
        if ctx.loop.step_count > 0:
            await ctx.complete_loop(reason="completed_by_host")
            return
        await self.app(ctx)


def _script(fake: FakeLLM) -> None:
    def by_prompt(last: Any) -> Reply:
        if last.role == "tool":
            return Reply(content="done")
        if "tools" in last.text:
            return Reply(
                tool_calls=[ToolCall("add", {"a": 1, "b": 2}), ToolCall("add", {"a": 3, "b": 4})]
            )
        return Reply(content="hello")

    fake.add(Rule(reply=by_prompt))


async def _all_at_rest(pool: Pool, ids: list[Any]) -> bool:
    async with connection(pool) as conn:
        rows = [await loops.get(conn, loop_id=i) for i in ids]
    return all(r is not None and r.status == "completed" for r in rows)


async def test_every_completed_loop_writes_one_loop_completed_event(
    pool: Pool, database_url: str
) -> None:
    registry = agents.registry()
    registry.register("host", HostCompletes)
    agents.CALLS.clear()
    starts = [
        ("calc", "say hi", {}),  # one turn, no tools
        ("calc", "say hi", {"stream": True}),  # streamed
        ("calc", "use tools", {}),  # tool calls, then the chained last turn
        ("calc", "use tools", {"stream": True}),
        ("calc_seq", "use tools", {}),  # sequential tool calls
        ("host", "use tools", {}),  # the host completes the loop (ctx.complete_loop)
    ] * 3
    async with FakeLLM() as fake:
        _script(fake)
        async with running_engine(pool, database_url, registry) as engine:
            ids = [
                (
                    await engine.lifecycle.start(
                        agent=agent, message=msg, state={"llm": fake.base_url, **extra}
                    )
                ).id
                for agent, msg, extra in starts
            ]
            await eventually(lambda: _all_at_rest(pool, ids), within=60)
    async with connection(pool) as conn:
        feed = await events.read_feed(conn, names=["loop.completed"], settle=0, limit=1000)
        rows = {i: await loops.get(conn, loop_id=i) for i in ids}
    by_loop: dict[Any, list[str | None]] = {}
    for e in feed.events:
        by_loop.setdefault(e.loop_id, []).append(e.reason)
    # Exactly one each, and its reason is the loop's status_reason.
    assert by_loop == {i: [row.status_reason] for i, row in rows.items() if row is not None}
    reasons = {r.status_reason for r in rows.values() if r is not None}
    assert reasons == {"model_finished", "completed_by_host"}

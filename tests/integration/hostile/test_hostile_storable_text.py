"""Text PostgreSQL cannot hold (NUL, a lone surrogate) arriving from outside, in every field
and every dialect, streaming and not: the loop carries on, the transcript holds U+FFFD where
the bad character was, and the paid completion's token counts are kept.

It used to fail the loop with `CharacterNotInRepertoireError` / `UntranslatableCharacterError`
(the raw driver error was the loop's error message), losing the answer."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.registry import AgentRegistry, agent_from_config
from agentd.store import loops, messages, tool_calls
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, LastMessage, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer

BAD = {"nul": "\x00", "surrogate": "\ud800"}
FFFD = "\ufffd"
USAGE = (17, 5)
DRIVER_WORDS = ("asyncpg", "CharacterNotInRepertoire", "UntranslatableCharacter", "0x00")


def _cases(bad: str) -> dict[str, Reply]:
    """One model answer per field, each carrying `bad` where that field's text comes from."""
    return {
        "text": Reply(content=f"before{bad}after", usage=USAGE),
        "reasoning": Reply(content="ok", reasoning=f"think{bad}hard", usage=USAGE),
        # echo returns its argument: the bad character reaches the arguments and the result
        "args": Reply(tool_calls=[ToolCall("ext__echo", {"text": f"x{bad}y"})], usage=USAGE),
        # an isError result: the MCP server's error text carries it
        "tool_error": Reply(
            tool_calls=[ToolCall("ext__fail", {"message": f"boom{bad}"})], usage=USAGE
        ),
        # a raw NUL byte in the body (a lone surrogate cannot be UTF-8: sent as its escape)
        "llm_error": Reply(
            status=400,
            error_body='{"error": {"message": "bad\x00request"}}'
            if bad == "\x00"
            else {"error": {"message": f"bad{bad}request"}},
        ),
    }


def _agent(name: str, dialect: str, streaming: bool, llm: str, mcp: str) -> Any:
    return agent_from_config(
        name,
        {
            "dialect": dialect,
            "base_url": llm,
            "model": "fake-model",
            "streaming": streaming,
            "max_steps": 4,
            "mcps": [{"name": "ext", "url": mcp, "prefix": "ext", "timeout": 5}],
        },
    )


def _tool_answered(last: LastMessage) -> bool:
    return last.role == "tool"


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", ["open_ai", "anthropic", "gemini"])
async def test_unstorable_characters_from_outside_become_u_fffd_and_the_loop_carries_on(
    pool: Pool, database_url: str, dialect: str, streaming: bool
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as mcp:
        fake.add(Rule(match=_tool_answered, reply=Reply(content="done", usage=USAGE)))
        for bad_name, bad in BAD.items():
            for field, reply in _cases(bad).items():
                fake.add(Rule(match=f"case {field} {bad_name}", reply=reply))
        registry = AgentRegistry()
        registry.register("a", _agent("a", dialect, streaming, fake.base_url, mcp.url))
        started: dict[tuple[str, str], uuid.UUID] = {}
        async with running_engine(pool, database_url, registry) as engine:
            lifecycle: Lifecycle = engine.lifecycle
            for bad_name in BAD:
                for field in _cases(""):
                    loop = await lifecycle.start(agent="a", message=f"case {field} {bad_name}")
                    started[(field, bad_name)] = loop.id

            async def settled() -> bool:
                async with connection(pool) as conn:
                    rows = [await loops.get(conn, loop_id=i) for i in started.values()]
                return all(r is not None and r.status in ("completed", "failed") for r in rows)

            await eventually(settled, within=60)

        async with connection(pool) as conn:
            for (field, bad_name), loop_id in started.items():
                where = f"{dialect} streaming={streaming} {field} {bad_name}"
                loop = await loops.get(conn, loop_id=loop_id)
                assert loop is not None
                history = await messages.list_(conn, loop_id=loop_id)
                calls = await tool_calls.list_for_loop(conn, loop_id=loop_id)
                events = await conn.fetch("SELECT * FROM events WHERE loop_id = $1", loop_id)
                wire = [e for e in events if e["name"] == "llm.request"]
                assert wire, f"{where}: the wire log was not stored"
                if field == "llm_error":
                    # A provider error fails the loop, with a clear message, logged.
                    assert loop.status == "failed", where
                    assert loop.error_message and "400" in loop.error_message, where
                    assert not any(w in loop.error_message for w in DRIVER_WORDS), where
                    bodies = [str(e["response_data"]["body"]) for e in wire]
                    sent = f"bad{FFFD}request" if bad_name == "nul" else "bad\\ud800request"
                    assert any(sent in b for b in bodies), (where, bodies)
                    continue
                assert loop.status == "completed", f"{where}: {loop.error_message}"
                answers = [m for m in history if m.role == "assistant"]
                assert answers[0].tokens_prompt == USAGE[0], where
                assert answers[0].tokens_completion == USAGE[1], where
                assert loop.tokens_prompt >= USAGE[0], where
                if field == "text":
                    assert answers[0].content == f"before{FFFD}after", where
                elif field == "reasoning":
                    assert answers[0].reasoning == f"think{FFFD}hard", where
                elif field == "args":
                    (call,) = calls
                    assert call.arguments == {"text": f"x{FFFD}y"}, where
                    assert call.is_success and call.result == f"x{FFFD}y", where
                    tool_msg = next(m for m in history if m.role == "tool")
                    assert tool_msg.content == f"x{FFFD}y", where
                elif field == "tool_error":
                    (call,) = calls
                    assert call.arguments == {"message": f"boom{FFFD}"}, where
                    assert call.is_success is False and FFFD in (call.result or ""), where

"""A model endpoint that cannot be reached gets the same policy as an MCP server that is
down: in-turn re-sends, then the turn is deferred with a growing delay (no worker slot
held), and only a run of failures `mcp_discovery_give_up_after` long fails the loop, naming
the URL.

Caught: a dead model URL failed the loop within 3 s (two quick re-sends) without naming
the URL, while an MCP outage was ridden out for 5 minutes.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from agentd.db.pool import Pool, connection
from agentd.store import events, loops
from agentd.testing import agents
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _settings(give_up: float) -> Any:
    return fast_settings(
        llm_retries=1,
        mcp_discovery_defer_delay=0.1,
        mcp_discovery_defer_max=0.3,
        mcp_discovery_give_up_after=give_up,
    )


async def _loop(pool: Pool, loop_id: Any) -> Any:
    async with connection(pool) as conn:
        return await loops.get(conn, loop_id=loop_id)


async def _deferrals(pool: Pool, loop_id: Any) -> int:
    async with connection(pool) as conn:
        found = await events.list_named(conn, loop_id=loop_id, names=["turn.deferred"])
    return sum(1 for e in found if e.reason == "llm_unavailable")


async def test_a_model_that_comes_back_within_the_window_completes_the_loop(
    pool: Pool, database_url: str
) -> None:
    port = _closed_port()
    async with running_engine(pool, database_url, agents.registry(), settings=_settings(60)) as e:
        loop = await e.lifecycle.start(
            agent="calc", message="hi", state={"llm": f"http://127.0.0.1:{port}"}
        )
        await eventually(lambda: _deferrals(pool, loop.id))
        row = await _loop(pool, loop.id)
        assert row.status in ("queued", "running") and row.error_message is None
        async with FakeLLM(port=port) as fake:
            fake.add(Rule(reply=Reply(content="back again")))

            async def completed() -> bool:
                return (await _loop(pool, loop.id)).status == "completed"

            await eventually(completed, within=30)


async def test_a_model_down_longer_than_the_window_fails_the_loop_naming_the_url(
    pool: Pool, database_url: str
) -> None:
    port = _closed_port()
    started = time.monotonic()
    async with running_engine(pool, database_url, agents.registry(), settings=_settings(1.5)) as e:
        loop = await e.lifecycle.start(
            agent="calc", message="hi", state={"llm": f"http://127.0.0.1:{port}"}
        )

        async def failed() -> Any:
            row = await _loop(pool, loop.id)
            return row if row.status == "failed" else None

        row = await eventually(failed, within=30)
    assert time.monotonic() - started >= 1.5  # not before the window
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in row.error_message
    assert "still failing after" in row.error_message
    assert await _deferrals(pool, loop.id) >= 2

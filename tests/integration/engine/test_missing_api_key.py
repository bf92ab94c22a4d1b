"""A TOML agent whose `api_key_env` is unset fails its turn naming the variable, and no
request goes out without the key."""

from __future__ import annotations

import pytest

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry, agent_from_config
from agentd.store import loops
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM


async def test_turn_fails_naming_the_unset_api_key_env(
    pool: Pool, database_url: str, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTD_TEST_MISSING_KEY", raising=False)
    registry = AgentRegistry()
    registry.register(
        "keyed",
        agent_from_config(
            "keyed",
            {"base_url": fake_llm.base_url, "model": "m", "api_key_env": "AGENTD_TEST_MISSING_KEY"},
        ),
    )
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(agent="keyed", message="hi")

        async def failed() -> object:
            async with connection(pool) as conn:
                row = await loops.get(conn, loop_id=loop.id)
            return row if row is not None and row.status == "failed" else None

        row = await eventually(failed)
    assert "AGENTD_TEST_MISSING_KEY" in (row.error_message or "")
    assert fake_llm.requests == []  # nothing went out without the key

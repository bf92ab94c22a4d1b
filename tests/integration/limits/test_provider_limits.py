"""rpm, tpm and max_concurrency per provider key hold across racing engines; a turn over a
limit is deferred (its job comes back when the window allows), never failed."""

from __future__ import annotations

import uuid

from limits_kit import all_completed, most_in_window, peak_overlap, two_engines

from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.registry import AgentRegistry
from agentd.store import events, providers
from agentd.testing.agents import CalcAgent
from agentd.testing.engine import eventually, fast_settings
from agentd.testing.fake_llm import FakeLLM

WINDOW = 1.0
USAGE = (100, 250)  # every answer reports 350 tokens


class TpmAgent(CalcAgent):
    provider_tpm = 1000
    max_tokens = 300  # the admission estimate counts the completion budget too


class RpmAgent(CalcAgent):
    provider_rpm = 2


class NarrowAgent(CalcAgent):
    provider_max_concurrency = 2


async def start_many(
    pool: Pool, registry: AgentRegistry, agent: str, n: int, llm: str
) -> list[uuid.UUID]:
    """Queue `n` loops before any engine runs: the engines then race for all of them at once,
    however slowly a loaded machine would have started them one by one (so every limit
    is really contended, and a deferral really happens)."""
    lifecycle = Lifecycle(pool, registry, fast_settings())
    out = []
    for i in range(n):
        loop = await lifecycle.start(agent=agent, message=f"loop {i}", state={"llm": llm})
        out.append(loop.id)
    return out


async def test_tokens_per_minute_hold_over_every_window_within_one_request(
    pool: Pool, second_pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("tpm", TpmAgent)
    fake_llm.reply(content="done", usage=USAGE)
    ids = await start_many(pool, registry, "tpm", 6, fake_llm.base_url)
    async with two_engines(pool, second_pool, database_url, registry, provider_rate_window=WINDOW):
        await eventually(lambda: all_completed(pool, ids), within=20)
    times = [r.at for r in fake_llm.requests]
    size = sum(USAGE)
    assert len(times) == 6
    # Measured where the provider sees them, with room for the trip from admission to it (on a
    # loaded machine two turns admitted a window apart reached the fake 0.95 s apart).
    assert most_in_window(times, WINDOW * 0.8, [size] * 6) <= TpmAgent.provider_tpm + size
    assert max(times) - min(times) >= WINDOW  # 2100 tokens cannot fit in one window
    async with connection(pool) as conn:
        [row] = await providers.list_(conn, window_seconds=60)
    assert row["tpm"] == 1000 and row["deferred"] >= 1 and row["admitted"] == 6
    # Rows still in the ledger carry the reported usage, not the (larger) estimate.
    assert row["window_tokens"] > 0 and row["window_tokens"] % size == 0


async def test_requests_per_minute_hold_across_racing_engines(
    pool: Pool, second_pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("rpm", RpmAgent)
    fake_llm.reply(content="done")
    ids = await start_many(pool, registry, "rpm", 5, fake_llm.base_url)
    async with two_engines(pool, second_pool, database_url, registry, provider_rate_window=WINDOW):
        await eventually(lambda: all_completed(pool, ids), within=20)
    times = [r.at for r in fake_llm.requests]
    assert len(times) == 5
    # Measured where the provider sees them, with room for the trip from admission to it.
    assert most_in_window(times, WINDOW * 0.8) <= RpmAgent.provider_rpm
    assert max(times) - min(times) >= 2 * WINDOW * 0.8  # five requests need three windows


async def test_max_concurrency_per_provider_key_holds_across_racing_engines(
    pool: Pool, second_pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    registry.register("narrow", NarrowAgent)
    fake_llm.reply(content="done", delay_before_first_byte=0.3)
    ids = await start_many(pool, registry, "narrow", 6, fake_llm.base_url)
    async with two_engines(pool, second_pool, database_url, registry, provider_retry_interval=0.1):
        await eventually(lambda: all_completed(pool, ids), within=20)
    spans = [(r.at, r.done_at) for r in fake_llm.requests]
    assert len(spans) == 6 and all(end is not None for _, end in spans)
    assert peak_overlap(spans) == NarrowAgent.provider_max_concurrency  # type: ignore[arg-type]
    async with connection(pool) as conn:
        [row] = await providers.list_(conn, window_seconds=60)
        evs = [e for i in ids for e in await events.list_(conn, loop_id=i, limit=100)]
    assert row["in_flight"] == 0 and row["deferred"] >= 1
    # Waiting for a slot leaves no trace in the transcript (it is retried every interval).
    assert not [e for e in evs if e.name == "turn.deferred"]
    assert not [e for e in evs if e.name in ("loop.failed", "loop.paused")]

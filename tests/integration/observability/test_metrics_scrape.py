from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import httpx
from observability_kit import Scrape

from agentd.api import probes
from agentd.api.serve import HttpServer
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection
from agentd.engine.reaper import Reaper
from agentd.engine.service import Engine
from agentd.observability.metrics import Telemetry
from agentd.pipeline.stacks import Stacks
from agentd.registry import AgentRegistry
from agentd.store import loops
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

TOKEN = "metrics-test-token"


def script_add_then_answer(fake: FakeLLM, *, retry_first: bool = False) -> None:
    if retry_first:
        fake.add(Rule(reply=Reply(status=503, error_body={"error": "busy"}), times=1))
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("add", {"a": 1, "b": 2})], usage=(30, 7)),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="3", usage=(50, 2))))


async def _status(pool: Pool, loop_id: uuid.UUID) -> str:
    async with connection(pool) as conn:
        loop = await loops.get(conn, loop_id=loop_id)
    assert loop is not None
    return loop.status


async def scrape_api(engine: Engine, pool: Pool, url: str, registry: AgentRegistry) -> Scrape:
    state = AppState.create(
        settings=engine.settings,
        pool=pool,
        registry=registry,
        database_url=url,
        api_token=TOKEN,
        engine=engine,
    )
    transport = httpx.ASGITransport(app=create_app(state))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c:
        r = await c.get("/metrics")
    assert r.status_code == 200, r.text
    return Scrape(r.text)


async def test_api_metrics_move_as_a_loop_runs_and_keep_labels_bounded(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script_add_then_answer(fake_llm, retry_first=True)
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="add 1+2", state={"llm": fake_llm.base_url, "stream": True}
        )
        await eventually(lambda: _is(pool, loop.id, "completed"))
        # The last turn is recorded when its task unwinds, just after the commit.
        await eventually(lambda: _done(engine, turns=2))
        await eventually(lambda: _renewed(engine))
        m = await scrape_api(engine, pool, database_url, registry)

    assert m.value("agentd_turns_total", outcome="tool_calls", agent="calc") == 1
    assert m.value("agentd_turns_total", outcome="completed", model="fake-model") == 1
    assert m.value("agentd_turn_duration_seconds_count", agent="calc") == 2
    # Streamed text has a first token; a streamed tool-call-only answer may not.
    assert m.value("agentd_llm_time_to_first_token_seconds_count", model="fake-model") >= 1
    assert m.value("agentd_llm_tokens_total", type="input", model="fake-model") == 80
    assert m.value("agentd_llm_tokens_total", type="output", agent="calc") == 9
    assert m.value("agentd_llm_retries_total", status="503") == 1
    assert m.value("agentd_llm_requests_total", status="503") == 1
    assert m.value("agentd_llm_requests_total", status="200") == 2
    assert m.value("agentd_tool_calls_total", outcome="completed", agent="calc") == 1
    assert m.value("agentd_tool_call_duration_seconds_count", outcome="completed") == 1
    assert m.value("agentd_lease_renewals_total") >= 1
    assert "agentd_leases_lost_total" in m.names()
    assert m.value("agentd_worker_in_flight", queue="llm") == 0
    assert m.value("agentd_worker_slots", queue="tool") == engine.settings.tool_concurrency
    assert m.value("agentd_db_pool_connections", state="in_use") >= 0
    assert m.value("agentd_db_pool_max_connections") == pool.get_max_size()
    assert "agentd_reaper_actions_total" in m.names()
    # The fleet gauges the HPA reads are still there, under their names.
    assert m.value("agentd_loops", status="completed", agent="calc") == 1
    assert {"agentd_queue_depth", "agentd_queue_oldest_job_age_seconds"} <= m.names()
    assert m.value("agentd_queue_depth", queue="llm") == 0
    m.assert_bounded()


async def test_a_paused_turn_counts_as_cancelled_not_failed(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    fake_llm.add(Rule(reply=Reply(content="never finishes", stall_after_chunks=1)))
    async with running_engine(pool, database_url, registry) as engine:
        loop = await engine.lifecycle.start(
            agent="calc", message="go", state={"llm": fake_llm.base_url, "stream": True}
        )
        await eventually(lambda: _in_flight(engine))
        await engine.lifecycle.pause(loop.id)
        await eventually(lambda: _done(engine, turns=1))
        m = await scrape_api(engine, pool, database_url, registry)
    stopped = m.value("agentd_turns_total", outcome="cancelled") + m.value(
        "agentd_turns_total", outcome="lease_lost"
    )
    assert stopped == 1
    assert m.value("agentd_turns_total", outcome="failed") == 0


async def test_worker_metrics_port_serves_metrics_and_probes_without_fleet_gauges(
    pool: Pool, database_url: str, registry: AgentRegistry, fake_llm: FakeLLM
) -> None:
    script_add_then_answer(fake_llm)
    settings = fast_settings(metrics_public=True)
    async with running_engine(pool, database_url, registry, settings=settings) as engine:
        server = HttpServer("127.0.0.1", 0)  # listening from here on
        stop = asyncio.Event()
        serving = asyncio.create_task(server.serve(probes.create_app(engine), stop))
        base = f"http://127.0.0.1:{server.port}"
        try:
            loop = await engine.lifecycle.start(
                agent="calc", message="add", state={"llm": fake_llm.base_url}
            )
            await eventually(lambda: _is(pool, loop.id, "completed"))
            await eventually(lambda: _done(engine, turns=2))
            async with httpx.AsyncClient(base_url=base) as http:
                assert (await http.get("/healthz")).json() == {"status": "ok"}
                ready = await eventually(lambda: _ready(http))
                r = await http.get("/metrics")
        finally:
            stop.set()
            await serving
            server.close()
    assert ready["checks"]["worker_heartbeat"] == "fresh"
    assert r.status_code == 200
    m = Scrape(r.text)
    assert m.value("agentd_turns_total") == 2
    assert m.value("agentd_tool_calls_total", outcome="completed") == 1
    assert m.value("agentd_lease_renewals_total") >= 1
    # Fleet gauges come from the API only: summing worker targets must not multiply them.
    assert "agentd_queue_depth" not in m.names() and "agentd_loops" not in m.names()
    m.assert_bounded()


async def test_worker_metrics_need_a_token_unless_public(
    pool: Pool, database_url: str, registry: AgentRegistry
) -> None:
    settings = fast_settings(read_tokens=["reader"])
    engine = Engine(
        settings=settings, pool=pool, registry=registry, url=database_url, stacks=Stacks()
    )
    transport = httpx.ASGITransport(app=probes.create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        assert (await http.get("/metrics")).status_code == 401
        ok = await http.get("/metrics", headers={"Authorization": "Bearer reader"})
        assert ok.status_code == 200
        assert (await http.get("/healthz")).status_code == 200


async def test_reaper_actions_are_read_from_its_totals_at_scrape_time(pool: Pool) -> None:
    telemetry = Telemetry()
    reaper = Reaper(fast_settings(), pool)
    telemetry.watch(reaper=reaper)
    reaper.totals.expired_turns += 2
    reaper.totals.orphaned_shells += 1
    from prometheus_client import generate_latest

    m = Scrape(generate_latest(telemetry.registry).decode())
    assert m.value("agentd_reaper_actions_total", case="expired_turns") == 2
    assert m.value("agentd_reaper_actions_total", case="orphaned_shells") == 1
    assert m.value("agentd_reaper_actions_total", case="dead_worker_turns") == 0


async def _is(pool: Pool, loop_id: uuid.UUID, status: str) -> bool:
    return await _status(pool, loop_id) == status


async def _done(engine: Engine, *, turns: int) -> bool:
    return sum(s.value for s in _samples(engine, "agentd_turns_total")) >= turns


async def _renewed(engine: Engine) -> bool:
    return engine.renewer.renewal_count >= 1


async def _in_flight(engine: Engine) -> bool:
    return engine.worker.busy["llm"] == 1


async def _ready(http: httpx.AsyncClient) -> dict | None:  # type: ignore[type-arg]
    r = await http.get("/readyz")
    return r.json() if r.status_code == 200 else None


def _samples(engine: Engine, name: str) -> list:  # type: ignore[type-arg]
    return [s for f in engine.telemetry.registry.collect() for s in f.samples if s.name == name]


#: `agentd_*` words in the docs that are not metrics and not SQL (which the test finds itself).
NOT_METRICS = {"agentd_admin": "the admin session cookie"}
_DOC_METRIC = re.compile(r"\bagentd_[a-z_]+[a-z]\b")


def _documented_metric_names() -> dict[str, list[str]]:
    root = Path(__file__).resolve().parents[3]
    sql = " ".join(
        p.read_text(encoding="utf-8")
        for p in [*root.glob("migrations/*.sql"), *root.glob("agentd/store/sql/*.sql")]
    )
    in_sql = set(_DOC_METRIC.findall(sql))
    found: dict[str, list[str]] = {}
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for name in _DOC_METRIC.findall(doc.read_text(encoding="utf-8")):
            if name not in in_sql and name not in NOT_METRICS:
                found.setdefault(name, []).append(doc.name)
    return found


def _exposed_names(text: str) -> set[str]:
    """Every name a query could use: families (TYPE lines, even without samples yet),
    samples, and a counter's base name (`agentd_turns` for `agentd_turns_total`)."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "counter":
                names.add(name.removesuffix("_total"))
            if kind == "histogram":
                names.update(f"{name}_{s}" for s in ("bucket", "count", "sum"))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


async def test_every_metric_the_docs_name_is_served(
    pool: Pool, database_url: str, registry: AgentRegistry
) -> None:
    """Caught: docs/operations.md named `agentd_unconsumed_queues`, the metric is
    `agentd_queue_unconsumed`. Every `agentd_*` word of README.md and docs/*.md that is not
    SQL must be a name in the /metrics of an app running an engine (as `agentd up`)."""
    documented = _documented_metric_names()
    assert "agentd_queue_unconsumed" in documented and "agentd_llm_cost_usd_total" in documented
    async with running_engine(pool, database_url, registry) as engine:
        state = AppState.create(
            settings=engine.settings,
            pool=pool,
            registry=registry,
            database_url=database_url,
            api_token=TOKEN,
            engine=engine,
        )
        transport = httpx.ASGITransport(app=create_app(state))
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as c:
            r = await c.get("/metrics")
    assert r.status_code == 200
    served = _exposed_names(r.text)
    missing = {name: docs for name, docs in documented.items() if name not in served}
    assert missing == {}

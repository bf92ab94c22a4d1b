"""Agent versions over the API and the Python client: GET /v1/agents, a loop's version and
waiting_for_version, POST /v1/loops/{id}/upgrade and /v1/agents/{name}/upgrade."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from agentd.client import AsyncClient
from agentd.client.errors import ApiError
from agentd.db.pool import Pool, connection
from agentd.engine import versions
from agentd.registry import AgentRegistry
from agentd.testing import agents
from tests.integration.api.conftest import TOKEN


class CalcV2(agents.CalcAgent):
    system_prompt = "You add numbers, version two."
    approval_required = ["add"]
    max_steps = 9


def v2_registry() -> AgentRegistry:
    r = AgentRegistry()
    r.register("calc", CalcV2)
    return r


async def test_versions_are_listed_with_their_loops_and_workers(
    client: httpx.AsyncClient, pool: Pool, registry: AgentRegistry
) -> None:
    await versions.record(pool, registry)
    await versions.record(pool, v2_registry())
    v1, v2 = registry.version_of("calc"), v2_registry().version_of("calc")
    r = await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})
    assert r.status_code == 201, r.text
    loop = r.json()
    assert loop["agent_version"] == v1 and loop["upgrade_to"] is None
    async with connection(pool) as conn:  # a live worker that runs v2 only
        wid = await conn.fetchval(
            "INSERT INTO workers (id, hostname, pid, queues) "
            "VALUES (gen_random_uuid(), 'h', 1, '{llm,tool}') RETURNING id"
        )
        await conn.execute(
            "INSERT INTO worker_versions (worker_id, agent_versions) VALUES ($1, $2)", wid, [v2]
        )
    shown = (await client.get(f"/v1/loops/{loop['id']}")).json()
    assert shown["waiting_for_version"] == v1
    items = (await client.get("/v1/agents")).json()["items"]
    calc = next(a for a in items if a["name"] == "calc")
    assert calc["source"] == "code" and calc["version"] == v1 and calc["model"] == "fake-model"
    by_id = {v["id"]: v for v in calc["versions"]}
    assert by_id[v1]["loops_active"] == 1 and by_id[v1]["workers"] == []
    assert by_id[v1]["current"] and not by_id[v2]["current"]
    assert by_id[v2]["loops_active"] == 0 and len(by_id[v2]["workers"]) == 1
    assert calc["versions"][0]["id"] == v2  # newest first


async def test_upgrade_a_loop_and_an_agent_through_the_client(
    app: FastAPI, client: httpx.AsyncClient, pool: Pool, registry: AgentRegistry
) -> None:
    await versions.record(pool, registry)
    await versions.record(pool, v2_registry())
    v1, v2 = registry.version_of("calc"), v2_registry().version_of("calc")
    ids = []
    for _ in range(2):
        r = await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})
        ids.append(r.json()["id"])
    async with AsyncClient(
        "http://agentd.test", TOKEN, transport=httpx.ASGITransport(app=app)
    ) as c:
        dry = await c.upgrade(ids[0], dry_run=True)
        assert dry.from_version == v1 and dry.to_version == v2 and dry.dry_run
        assert dry.diff["approval_required"] == {"added": ["add"], "removed": []}
        assert dry.diff["limits"] == {"max_steps": {"from": 50, "to": 9}}
        assert (await c.get(ids[0])).upgrade_to is None
        done = await c.upgrade(ids[0], to_version=v2)
        assert done.pending_upgrade == v2
        loop = await c.get(ids[0])
        assert loop.agent_version == v1 and loop.upgrade_to == v2
        bulk = await c.upgrade_agent("calc", from_version=v1)
        assert [str(i) for i in bulk.loops] == [ids[1]] and not bulk.remaining
        assert (await c.get(ids[1])).upgrade_to == v2
        back = await c.upgrade(ids[0], to_version=v1)  # its own version: nothing pending
        assert back.pending_upgrade is None
        with pytest.raises(ApiError) as bad:
            await c.upgrade(ids[0], to_version="nope")
        assert bad.value.status == 422 and bad.value.problem_type == "unknown-version"
    async with connection(pool) as conn:
        audit = await conn.fetch(
            "SELECT log FROM events WHERE name = 'loop.upgrade_requested' ORDER BY id"
        )
    assert len(audit) == 3 and '"by": "api:operator"' in audit[0]["log"]


@pytest.mark.parametrize(
    "body", [{"dry_run": "yes"}, {"to_version": 5}, {"to_version": ""}, {"other": 1}]
)
async def test_a_bad_upgrade_body_is_a_4xx_and_changes_nothing(
    client: httpx.AsyncClient, pool: Pool, registry: AgentRegistry, body: dict[str, object]
) -> None:
    await versions.record(pool, registry)
    loop = (await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})).json()
    r = await client.post(f"/v1/loops/{loop['id']}/upgrade", json=body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert (await client.get(f"/v1/loops/{loop['id']}")).json()["upgrade_to"] is None


async def test_upgrade_of_an_unknown_loop_or_agent_is_a_clear_problem(
    client: httpx.AsyncClient, pool: Pool, registry: AgentRegistry
) -> None:
    await versions.record(pool, registry)
    r = await client.post(
        "/v1/loops/00000000-0000-0000-0000-000000000000/upgrade", json={"dry_run": True}
    )
    assert r.status_code == 404 and r.json()["type"].endswith("/loop-not-found")
    r = await client.post("/v1/agents/nobody/upgrade", json={})
    assert r.status_code == 422 and r.json()["type"].endswith("/unknown-agent")
    await versions.record(pool, v2_registry())
    other = AgentRegistry()
    other.register("calc_seq", agents.SequentialCalcAgent)
    await versions.record(pool, other)
    loop = (await client.post("/v1/loops", json={"agent": "calc", "message": "hi"})).json()
    r = await client.post(
        f"/v1/loops/{loop['id']}/upgrade", json={"to_version": other.version_of("calc_seq")}
    )
    assert r.status_code == 400 and "not 'calc'" in r.json()["detail"]

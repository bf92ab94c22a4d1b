"""Changing an agent under running loops, black box (docs/upgrading.md, "Changing an agent
under running loops"): real `agentd api` and `agentd worker` processes with different TOML
files against one database, loops over REST.

The agent `support` has an MCP server whose tools are prefixed; its `approval_required`
names the prefixed `add` (the "refund"). Version 1 prefixes with `shop`, version 2 renames
the prefix to `store` and updates the rule to match — the change that once let a loop
started before it run `shop__add` with no approval. A version 3 changes only the prompt,
to upgrade a loop mid-run (a call parked for approval) and see it apply at the turn after.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.db.pool import Pool, connection
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer
from agentd.testing.up import free_port

from ._procs import AGENTD, Fleet, fleet, poll

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.timeout(240)]

TOKEN = "versions-test-token"

AGENT = """\
[agents.support]
base_url = "{llm}"
model = "fake-model"
system_prompt = "You are support ({prefix}{note})."
approval_required = ["{prefix}__add"]

[[agents.support.mcps]]
name = "billing"
url = "{mcp}"
prefix = "{prefix}"
"""


def script(fake: FakeLLM) -> None:
    """ "refund-<prefix>" asks for <prefix>__add; a tool result or anything else ends."""

    def ask(last: Any) -> Reply:
        prefix = last.text.removeprefix("refund-")
        return Reply(tool_calls=[ToolCall(f"{prefix}__add", {"a": 99_999, "b": 0})])

    fake.add(
        Rule(match=lambda last: last.role == "user" and last.text.startswith("refund-"), reply=ask)
    )
    fake.add(Rule(match=None, reply=Reply(content="done")))


async def worker(f: Fleet, pool: Pool, name: str, config: Path) -> Any:
    return await f.worker(name, pool, AGENTD_CONFIG=str(config))


async def cli(f: Fleet, *args: str) -> tuple[int, str]:
    """`agentd ARGS` against the API (its token in AGENTD_API_TOKEN): (exit code, output)."""
    proc = await asyncio.create_subprocess_exec(
        AGENTD,
        *args,
        env={**f.env, "AGENTD_API_TOKEN": TOKEN},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode is not None
    return proc.returncode, out.decode() + err.decode()


async def loop(http: httpx.AsyncClient, loop_id: str) -> dict[str, Any]:
    r = await http.get(f"/v1/loops/{loop_id}")
    assert r.status_code == 200, r.text
    return r.json()


async def status_is(http: httpx.AsyncClient, loop_id: str, *statuses: str) -> dict[str, Any] | None:
    row = await loop(http, loop_id)
    return row if row["status"] in statuses else None


async def pending_approval(http: httpx.AsyncClient, loop_id: str) -> dict[str, Any] | None:
    r = await http.get(f"/v1/loops/{loop_id}/approvals")
    items = r.json()["items"]
    return items[0] if items else None


async def test_changing_an_agent_under_running_loops(
    tmp_path: Path, database_url: str, pool: Pool
) -> None:
    async with FakeLLM() as fake, FakeMcpServer() as mcp:
        script(fake)
        v1 = tmp_path / "v1.toml"
        v2 = tmp_path / "v2.toml"
        v3 = tmp_path / "v3.toml"
        v1.write_text(AGENT.format(llm=fake.base_url, mcp=mcp.url, prefix="shop", note=""))
        v2.write_text(AGENT.format(llm=fake.base_url, mcp=mcp.url, prefix="store", note=""))
        v3.write_text(AGENT.format(llm=fake.base_url, mcp=mcp.url, prefix="store", note=", v3"))
        port = free_port()
        async with fleet(tmp_path, database_url) as f:
            await f.start(
                "api", "api", AGENTD_CONFIG=str(v1), AGENTD_API_TOKEN=TOKEN, AGENTD_PORT=str(port)
            )
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=10,
            ) as http:

                async def ready() -> bool:
                    try:
                        return (await http.get("/readyz")).status_code == 200
                    except httpx.TransportError:
                        return False

                await poll(ready, within=60, what="api ready")
                w1 = await worker(f, pool, "w1-v1", v1)

                # 1. A loop starts on version 1 (the API's) and lists its tools as shop__*.
                r = await http.post("/v1/loops", json={"agent": "support", "message": "hello"})
                assert r.status_code == 201, r.text
                lid = r.json()["id"]
                await poll(lambda: status_is(http, lid, "completed"), within=30, what="turn 1")
                ver1 = (await loop(http, lid))["agent_version"]
                assert ver1

                # 2. Rolling deploy: a worker with version 2 starts beside version 1's.
                w2 = await worker(f, pool, "w2-v2", v2)
                agents = (await http.get("/v1/agents")).json()["items"]
                (support,) = [a for a in agents if a["name"] == "support"]
                by_id = {v["id"]: v for v in support["versions"]}
                assert len(by_id) == 2 and ver1 in by_id
                ver2 = next(v for v in by_id if v != ver1)
                assert by_id[ver1]["workers"] == [str(w1.worker_id)]
                assert by_id[ver2]["workers"] == [str(w2.worker_id)]

                # 3. Version 1's worker goes away: the loop, continued, waits for it —
                # never run by version 2's worker (which would not gate shop__add), never
                # failed.
                w1.terminate()
                assert await w1.exited(within=30) == 0
                requests_before = len(fake.requests)
                r = await http.post(f"/v1/loops/{lid}/messages", json={"content": "refund-shop"})
                assert r.status_code == 200, r.text

                async def waiting() -> dict[str, Any] | None:
                    row = await loop(http, lid)
                    ok = row["status_reason"] == "waiting_for_version"
                    return row if ok and row["waiting_for_version"] == ver1 else None

                row = await poll(waiting, within=30, what="waiting_for_version")
                assert row["status"] == "queued"
                assert len(fake.requests) == requests_before  # nobody ran its turn
                names = [
                    e["name"] for e in (await http.get(f"/v1/loops/{lid}/events")).json()["items"]
                ]
                assert "loop.waiting_for_version" in names

                # 4. A worker with version 1 starts again: the loop resumes by itself, and
                # version 1's rule parks the 99,999 shop__add for a person.
                w1b = await worker(f, pool, "w1b-v1", v1)
                call = await poll(lambda: pending_approval(http, lid), within=30, what="parked")
                assert call["name"] == "shop__add" and call["approval_status"] == "pending"
                assert mcp.calls() == []  # nothing ran

                # 5. Upgrading now would orphan the parked call (renamed to store__add).
                r = await http.post(f"/v1/loops/{lid}/upgrade", json={"dry_run": True})
                assert r.status_code == 200, r.text
                plan = r.json()
                assert plan["to_version"] == ver2 and plan["orphaned_calls"] == ["shop__add"]
                assert {"from": "shop__add", "to": "store__add"} in plan["diff"]["tools"]["renamed"]
                assert plan["diff"]["approval_required"] == {
                    "added": ["store__add"],
                    "removed": ["shop__add"],
                }
                r = await http.post(f"/v1/loops/{lid}/upgrade", json={})
                assert r.status_code == 409, r.text
                assert r.json()["type"].endswith("/upgrade-would-orphan")
                # The same through the CLI: the dry run's JSON, and exit 1 on the refusal.
                code, out = await cli(f, "upgrade", lid, "--dry-run", "--url", str(http.base_url))
                assert code == 0 and json.loads(out)["orphaned_calls"] == ["shop__add"], out
                code, out = await cli(f, "upgrade", lid, "--url", str(http.base_url))
                assert code == 1 and "upgrade-would-orphan" in out, out

                # 6. Approved, the call runs on version 1 and the turn ends; the upgrade is
                # then accepted and waits for the next turn boundary.
                r = await http.post(f"/v1/tool-calls/{call['id']}/approve", json={})
                assert r.status_code == 200, r.text
                await poll(lambda: status_is(http, lid, "completed"), within=30, what="turn 3")
                assert len(mcp.calls()) == 1
                r = await http.post(f"/v1/loops/{lid}/upgrade", json={})
                assert r.status_code == 200, r.text
                row = await loop(http, lid)
                assert row["agent_version"] == ver1 and row["upgrade_to"] == ver2

                # 7. Version 1's worker leaves for good; the next turn runs on version 2:
                # its tools are listed again as store__*, and its rule parks store__add.
                w1b.terminate()
                assert await w1b.exited(within=30) == 0
                r = await http.post(f"/v1/loops/{lid}/messages", json={"content": "refund-store"})
                assert r.status_code == 200, r.text
                call = await poll(lambda: pending_approval(http, lid), within=30, what="parked v2")
                assert call["name"] == "store__add" and call["approval_status"] == "pending"
                row = await loop(http, lid)
                assert row["agent_version"] == ver2 and row["upgrade_to"] is None
                assert len(mcp.calls()) == 1
                events = (await http.get(f"/v1/loops/{lid}/events?limit=1000")).json()["items"]
                assert [e["name"] for e in events].count("loop.upgraded") == 1

                # 8. Upgraded mid-run: with store__add parked, a version 3 (another prompt,
                # same tools) is accepted; the parked call still runs on version 2's
                # worker, and only the turn after it runs on version 3.
                await worker(f, pool, "w3-v3", v3)
                r = await http.post(f"/v1/loops/{lid}/upgrade", json={})
                assert r.status_code == 200, r.text
                ver3 = r.json()["to_version"]
                assert ver3 not in (ver1, ver2) and r.json()["orphaned_calls"] == []
                assert r.json()["diff"]["changed"] == ["system_prompt"]
                assert (await loop(http, lid))["agent_version"] == ver2
                turns_before = len(fake.requests)
                r = await http.post(f"/v1/tool-calls/{call['id']}/approve", json={})
                assert r.status_code == 200, r.text
                await poll(lambda: status_is(http, lid, "completed"), within=30, what="turn 5")
                row = await loop(http, lid)
                assert row["agent_version"] == ver3 and row["upgrade_to"] is None
                assert len(mcp.calls()) == 2
                (last_turn,) = fake.requests[turns_before:]
                prompt = last_turn.json["messages"][0]  # type: ignore[index,call-overload]
                assert prompt == {"role": "system", "content": "You are support (store, v3)."}
                async with connection(pool) as conn:
                    ran_before = await conn.fetchval(
                        "SELECT t.executed_at < e.created_at FROM tool_calls t, events e "
                        "WHERE t.id = $1 AND e.loop_id = t.loop_id AND e.name = 'loop.upgraded' "
                        "ORDER BY e.id DESC LIMIT 1",
                        call["id"],
                    )
                assert ran_before  # the call ran before the upgrade applied

    async with connection(pool) as conn:
        failed = await conn.fetchval("SELECT count(*) FROM loops WHERE status = 'failed'")
        ids = await conn.fetch("SELECT id FROM loops")
    assert failed == 0 and len(ids) == 1 and isinstance(ids[0]["id"], uuid.UUID)

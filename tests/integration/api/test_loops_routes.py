from __future__ import annotations

import uuid

import httpx
import pytest

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

PROBLEM = "application/problem+json"


async def start(client: httpx.AsyncClient, fake: FakeLLM | None = None, **kw: object) -> dict:
    body = {"agent": "calc", "message": "add 1 and 2", "state": {"llm": "http://127.0.0.1:9"}}
    if fake is not None:
        body["state"] = {"llm": fake.base_url}
    body.update(kw)
    r = await client.post("/v1/loops", json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def status_is(client: httpx.AsyncClient, loop_id: str, status: str) -> bool:
    return (await client.get(f"/v1/loops/{loop_id}")).json()["status"] == status


def script_add(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(content="Let me add.", tool_calls=[ToolCall("add", {"a": 1, "b": 2})]),
        )
    )
    fake.add(
        Rule(
            match=lambda last: last.role == "tool",
            reply=Reply(content="The sum is 3", reasoning="1 + 2 = 3"),
        )
    )


async def test_start_returns_201_with_the_loop_and_its_location(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post(
        "/v1/loops",
        json={"agent": "calc", "message": "hi", "subject": "user-1", "state": {"llm": "x"}},
    )
    assert r.status_code == 201
    loop = r.json()
    assert r.headers["location"] == f"/v1/loops/{loop['id']}"
    assert loop["agent"] == "calc" and loop["status"] == "queued" and loop["subject"] == "user-1"
    for key in ("step_count", "error_message", "created_at", "updated_at", "state", "tokens"):
        assert key in loop
    shown = await client.get(f"/v1/loops/{loop['id']}")
    assert shown.status_code == 200 and shown.json()["id"] == loop["id"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": "hi"}, "body.agent"),
        ({"agent": "calc"}, "body.message"),
        ({"agent": "calc", "message": "   "}, "body.message"),
        ({"agent": "calc", "message": "a\u0000b"}, "body.message"),
        ({"agent": "calc", "message": "hi", "state": {"k": "\u0000"}}, "body.state"),
        ({"agent": "calc", "message": "hi", "state": [1]}, "body.state"),
        ({"agent": "calc", "message": "hi", "colour": "red"}, "body.colour"),
    ],
)
async def test_start_with_bad_body_is_422_naming_the_field(
    client: httpx.AsyncClient, body: dict, field: str
) -> None:
    r = await client.post("/v1/loops", json=body)
    assert r.status_code == 422
    assert r.headers["content-type"] == PROBLEM
    problem = r.json()
    assert problem["type"] == "https://agentd.dev/problems/validation-error"
    assert field in [e["field"] for e in problem["errors"]]
    assert field in problem["detail"]
    assert (await client.get("/v1/loops")).json()["items"] == []


async def test_start_with_unknown_agent_is_422_naming_the_agent(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/v1/loops", json={"agent": "nobody", "message": "hi"})
    assert r.status_code == 422
    assert r.json()["type"].endswith("/unknown-agent")
    assert "nobody" in r.json()["detail"] and r.json()["agent"] == "nobody"


async def test_start_with_invalid_json_is_422(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/loops", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 422 and r.headers["content-type"] == PROBLEM


async def test_body_over_the_limit_is_413(client: httpx.AsyncClient) -> None:
    huge = "x" * 2_000_000
    r = await client.post("/v1/loops", json={"agent": "calc", "message": huge})
    assert r.status_code == 413
    assert r.json()["type"].endswith("/payload-too-large")


async def test_chunked_body_over_the_limit_is_413(client: httpx.AsyncClient) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(40):
            yield b"x" * 100_000

    r = await client.post(
        "/v1/loops", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 413


async def test_unknown_loop_is_404_and_malformed_id_is_422(client: httpx.AsyncClient) -> None:
    missing = uuid.uuid4()
    for path in ("", "/messages", "/events", "/approvals", "/stream"):
        r = await client.get(f"/v1/loops/{missing}{path}")
        assert r.status_code == 404, path
        assert r.json()["type"].endswith("/loop-not-found")
    for action in ("pause", "resume", "stop", "freeze", "unfreeze", "observe"):
        r = await client.post(f"/v1/loops/{missing}/{action}")
        assert r.status_code == 404, action
    r = await client.post(f"/v1/loops/{missing}/messages", json={"content": "hi"})
    assert r.status_code == 404
    r = await client.get("/v1/loops/not-a-uuid")
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "path.loop_id"
    r = await client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.headers["content-type"] == PROBLEM


async def test_list_filters_by_status_and_agent(client: httpx.AsyncClient) -> None:
    a = await start(client)
    b = await start(client, agent="calc_seq")
    await client.post(f"/v1/loops/{a['id']}/pause")
    r = await client.get("/v1/loops", params={"status": "paused"})
    assert [x["id"] for x in r.json()["items"]] == [a["id"]]
    r = await client.get("/v1/loops", params={"agent": "calc_seq"})
    assert [x["id"] for x in r.json()["items"]] == [b["id"]]
    r = await client.get("/v1/loops")
    assert [x["id"] for x in r.json()["items"]] == [b["id"], a["id"]]  # newest first
    assert (await client.get("/v1/loops", params={"status": "bogus"})).status_code == 422
    assert (await client.get("/v1/loops", params={"limit": 0})).status_code == 422
    r = await client.get("/v1/loops", params={"cursor": "not-a-cursor"})
    assert r.status_code == 400 and r.json()["type"].endswith("/invalid-cursor")


async def test_illegal_transitions_are_409_with_current_status(
    client: httpx.AsyncClient,
) -> None:
    loop = await start(client)
    lid = loop["id"]
    r = await client.post(f"/v1/loops/{lid}/resume")
    assert r.status_code == 409
    assert r.json()["current_status"] == "queued"
    assert r.json()["type"].endswith("/invalid-transition")
    r = await client.post(f"/v1/loops/{lid}/messages", json={"content": "more"})
    # a loop that is not at rest takes it as a steering message (queue, by default)
    assert r.status_code == 202 and r.json()["sent"]["status"] == "pending"
    assert (await client.post(f"/v1/loops/{lid}/stop")).json()["status"] == "stopped"
    assert (await client.post(f"/v1/loops/{lid}/stop")).status_code == 200  # idempotent
    r = await client.post(f"/v1/loops/{lid}/pause")
    assert r.status_code == 409 and r.json()["current_status"] == "stopped"
    r = await client.post(f"/v1/loops/{lid}/resume", json={"from": ["paused"]})
    assert r.status_code == 409 and r.json()["current_status"] == "stopped"
    r = await client.post(f"/v1/loops/{lid}/resume", json={"from": ["running"]})
    assert r.status_code == 400  # running can never be resumed
    r = await client.post(f"/v1/loops/{lid}/resume", json={"from": ["sideways"]})
    assert r.status_code == 422 and "body.from" in r.json()["detail"]


async def test_pause_resume_freeze_unfreeze_observe(client: httpx.AsyncClient) -> None:
    lid = (await start(client))["id"]
    assert (await client.post(f"/v1/loops/{lid}/pause")).json()["status"] == "paused"
    assert (await client.post(f"/v1/loops/{lid}/pause")).json()["status"] == "paused"
    r = await client.post(f"/v1/loops/{lid}/resume", json={"from": ["paused"]})
    assert r.status_code == 200 and r.json()["status"] == "queued"
    assert (await client.post(f"/v1/loops/{lid}/freeze")).json()["frozen"] is True
    assert (await client.post(f"/v1/loops/{lid}/unfreeze")).json()["frozen"] is False
    assert (await client.post(f"/v1/loops/{lid}/observe")).json()["observed"] is True
    r = await client.post(f"/v1/loops/{lid}/observe", json={"observed": False})
    assert r.json()["observed"] is False


async def test_transcript_events_and_continue_on_a_real_run(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    fake_llm.add(Rule(match="thanks", reply=Reply(content="You are welcome")))
    script_add(fake_llm)
    async with running_engine(pool, database_url, registry):
        lid = (await start(client, fake_llm))["id"]
        await eventually(lambda: status_is(client, lid, "completed"))
        r = await client.get(f"/v1/loops/{lid}/messages")
        items = r.json()["items"]
        assert [m["role"] for m in items] == ["user", "assistant", "tool", "assistant"]
        call = items[1]["tool_calls"][0]
        assert call["name"] == "add" and call["arguments"] == {"a": 1, "b": 2}
        assert call["result"] == "3" and call["is_success"] is True
        assert call["status"] == "completed"
        assert items[2]["tool_call_id"] == call["id"] and items[2]["content"] == "3"
        assert items[3]["content"] == "The sum is 3" and items[3]["reasoning"] == "1 + 2 = 3"
        assert r.json()["next_cursor"] is None

        r = await client.post(f"/v1/loops/{lid}/messages", json={"content": "thanks"})
        assert r.status_code == 200 and r.json()["status"] == "queued"
        await eventually(lambda: status_is(client, lid, "completed"))
    items = (await client.get(f"/v1/loops/{lid}/messages")).json()["items"]
    assert [m["content"] for m in items][-2:] == ["thanks", "You are welcome"]

    events = (await client.get(f"/v1/loops/{lid}/events", params={"limit": 1000})).json()
    names = [e["name"] for e in events["items"]]
    assert "loop.started" in names and "loop.continued" in names
    wire = [e for e in events["items"] if e["url"]]
    assert wire and all(e["http_method"] for e in wire)
    # Pages with `after` walk every event once.
    seen: list[int] = []
    after = 0
    while True:
        page = (
            await client.get(f"/v1/loops/{lid}/events", params={"after": after, "limit": 3})
        ).json()
        seen += [e["id"] for e in page["items"]]
        if page["next_cursor"] is None:
            break
        after = int(page["next_cursor"])
    assert seen == [e["id"] for e in events["items"]]


async def test_hidden_partials_only_with_include_hidden(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    fake_llm.add(Rule(reply=Reply(content="a slow answer " * 20, chunk_size=4, chunk_delay=0.05)))
    async with running_engine(pool, database_url, registry):
        lid = (await start(client, state={"llm": fake_llm.base_url, "stream": True}))["id"]

        async def partial_saved() -> bool:
            r = await client.get(f"/v1/loops/{lid}/messages", params={"include_hidden": True})
            return any(m["hidden"] and m["content"] for m in r.json()["items"])

        await eventually(partial_saved)
        r = await client.post(f"/v1/loops/{lid}/pause")
        assert r.json()["status"] == "paused"
    visible = (await client.get(f"/v1/loops/{lid}/messages")).json()["items"]
    assert [m["role"] for m in visible] == ["user"]
    everything = (
        await client.get(f"/v1/loops/{lid}/messages", params={"include_hidden": "true"})
    ).json()["items"]
    assert [m["role"] for m in everything] == ["user", "assistant"]
    assert everything[1]["hidden"] is True


async def test_agents_lists_the_registry(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/agents")
    names = [a["name"] for a in r.json()["items"]]
    assert "calc" in names and "calc_seq" in names
    assert r.json()["next_cursor"] is None


async def test_an_unexpected_exception_is_a_logged_500_problem(
    app_state: AppState, make_client
) -> None:  # type: ignore[no-untyped-def]
    app = create_app(app_state)

    async def boom() -> None:
        raise RuntimeError("secret internals")

    app.add_api_route("/v1/boom", boom)
    async with make_client(app) as c:
        r = await c.get("/v1/boom")
    assert r.status_code == 500 and r.headers["content-type"] == PROBLEM
    assert "secret internals" not in r.text

"""POST of an AG-UI RunAgentInput (built with the `ag-ui-protocol` models, as a client
sends it) starts a thread (threadId = the loop id) and continues it; the answer is the
run's AG-UI event stream, validated like the GET stream's."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from ag_ui.core import RunAgentInput, UserMessage
from fastapi import FastAPI

from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.store import loop_inputs
from agentd.testing.engine import running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule
from tests.integration.api.test_agui import AUTH, EVENT, _no_extras, check_order


@pytest.fixture
async def live(app: FastAPI, live_server: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client,
    ):
        yield client


def run_input(
    thread: uuid.UUID, messages: list[Any], state: dict[str, Any] | None = None
) -> dict[str, Any]:
    body = RunAgentInput(
        thread_id=str(thread),
        run_id=str(uuid.uuid4()),
        state=state or {},
        messages=messages,
        tools=[],
        context=[],
        forwarded_props={},
    )
    return body.model_dump(mode="json", by_alias=True, exclude_none=True)


async def post_run(
    client: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with client.stream("POST", path, json=body, headers={"Accept": "text/event-stream"}) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                data = json.loads(line[6:])
                _no_extras(EVENT.validate_python(data), data["type"])
                out.append(data)
    return out


async def test_run_agent_input_starts_a_thread_and_continues_it(
    live: httpx.AsyncClient,
    app: FastAPI,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
) -> None:
    fake_llm.add(Rule(match="hello", reply=Reply(content="Hi there, how can I help?")))
    fake_llm.add(Rule(match="thanks", reply=Reply(content="You are welcome.")))
    thread = uuid.uuid4()
    first = UserMessage(id="u-1", role="user", content="hello")
    async with running_engine(pool, database_url, registry, settings=settings):
        path = "/v1/agents/calc/ag-ui"
        events = await post_run(live, path, run_input(thread, [first], {"llm": fake_llm.base_url}))
        check_order(events)
        assert events[0]["threadId"] == str(thread)
        assert events[-1]["type"] == "RUN_FINISHED"
        snapshot = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"][-1]["messages"]
        texts = [m.get("content") for m in snapshot]
        streamed = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert "hello" in texts
        assert "Hi there, how can I help?" in [*texts, streamed]
        loop = (await live.get(f"/v1/loops/{thread}")).json()
        assert loop["status"] == "completed" and loop["state"]["llm"] == fake_llm.base_url

        # The client's next run: the snapshot's messages (agentd ids) plus a new one,
        # posted to the loop's own AG-UI endpoint (the GET stream's path).
        known = [m for m in snapshot if m["role"] in ("user", "assistant")]
        second = UserMessage(id="u-2", role="user", content="thanks")
        body = run_input(thread, [*known, second.model_dump(by_alias=True)], {"tier": "gold"})
        events = await post_run(live, f"/v1/loops/{thread}/stream?protocol=ag-ui", body)
        check_order(events)
        again = await post_run(live, path, body)  # a retried POST adds nothing
        check_order(again)
    items = (await live.get(f"/v1/loops/{thread}/messages")).json()["items"]
    assert [(m["role"], m["content"]) for m in items] == [
        ("user", "hello"),
        ("assistant", "Hi there, how can I help?"),
        ("user", "thanks"),
        ("assistant", "You are welcome."),
    ]
    state = (await live.get(f"/v1/loops/{thread}/state")).json()["state"]
    assert state["tier"] == "gold"
    async with connection(pool) as conn:
        sent = await loop_inputs.list_(conn, loop_id=thread)
    assert [i.idempotency_key for i in sent] == ["ag-ui:u-1", "ag-ui:u-2"]


async def test_bad_run_agent_input_is_422_and_starts_nothing(live: httpx.AsyncClient) -> None:
    path = "/v1/agents/calc/ag-ui"
    msg = {"id": "u", "role": "user", "content": "hi"}
    r = await live.post(path, json={"threadId": "not-a-uuid", "runId": "r", "messages": [msg]})
    assert r.status_code == 422 and "threadId" in r.json()["detail"]
    thread = str(uuid.uuid4())
    r = await live.post(path, json={"threadId": thread, "runId": "r", "messages": []})
    assert r.status_code == 422 and "user message" in r.json()["detail"]
    r = await live.post(path, json={"runId": "r"})
    assert r.status_code == 422
    r = await live.post("/v1/agents/nobody/ag-ui", json={"threadId": thread, "runId": "r",
                                                           "messages": [msg]})  # fmt: skip
    assert r.status_code == 422 and r.json()["type"].endswith("/unknown-agent")
    other = str(uuid.uuid4())
    r = await live.post(
        f"/v1/loops/{thread}/stream", json={"threadId": other, "runId": "r", "messages": [msg]}
    )
    assert r.status_code == 422
    assert (await live.get("/v1/loops")).json()["items"] == []

"""GET /v1/loops/{id}/stream?protocol=ag-ui over real HTTP while a worker runs the loop:
every event validates against the `ag-ui-protocol` package's models (no unknown fields)
and follows the protocol's order; Last-Event-ID resumes the run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from ag_ui.core import Event
from fastapi import FastAPI
from pydantic import BaseModel, TypeAdapter

from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

TOKEN = "operator-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
INTRO = "Let me add those numbers for you."
ANSWER = "The sum of one and two is three, as you can see. " * 3
EVENT: TypeAdapter[Any] = TypeAdapter(Event)


def script(fake: FakeLLM) -> None:
    call = ToolCall("add", {"a": 1, "b": 2})
    first = Reply(content=INTRO, tool_calls=[call], chunk_size=6, chunk_delay=0.03)
    fake.add(Rule(match=lambda last: last.role == "user", reply=first))
    answer = Reply(content=ANSWER, chunk_size=6, chunk_delay=0.03)
    fake.add(Rule(match=lambda last: last.role == "tool", reply=answer))


def _no_extras(model: BaseModel, where: str) -> None:
    # The generated models keep unknown fields; a misspelt field would pass validation.
    assert not model.model_extra, (
        f"{where}: fields the protocol does not define: {model.model_extra}"
    )
    for name in type(model).model_fields:
        value = getattr(model, name)
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, BaseModel):
                _no_extras(v, f"{where}.{name}")


async def read_agui(
    client: httpx.AsyncClient, lid: str, headers: dict[str, str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(event id, JSON) of every AG-UI event of one connection, each validated."""
    out: list[tuple[str, dict[str, Any]]] = []
    event_id = ""
    async with client.stream(
        "GET", f"/v1/loops/{lid}/stream", params={"protocol": "ag-ui"}, headers=headers
    ) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                model = EVENT.validate_python(data)
                _no_extras(model, data["type"])
                # What we wrote is what the model writes: camelCase, nulls left out.
                assert model.model_dump(mode="json", by_alias=True) == data
                out.append((event_id, data))
    return out


def check_order(events: list[dict[str, Any]], *, resumed: bool = False) -> None:
    """The AG-UI sequencing rules this stream must keep."""
    types = [e["type"] for e in events]
    if not resumed:
        assert types[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"]
    assert types.count("RUN_STARTED") == (0 if resumed else 1)
    assert types[-1] in ("RUN_FINISHED", "RUN_ERROR")
    assert types.count("RUN_FINISHED") + types.count("RUN_ERROR") == 1
    open_text: set[str] = set()
    closed_text: set[str] = set()
    calls: dict[str, str] = {}  # tool call id -> started | ended | answered
    for e in events:
        t = e["type"]
        if t == "TEXT_MESSAGE_START":
            assert e["messageId"] not in open_text | closed_text
            assert not open_text, "one text message at a time"
            open_text.add(e["messageId"])
        elif t == "TEXT_MESSAGE_CONTENT":
            assert e["messageId"] in open_text and e["delta"]
        elif t == "TEXT_MESSAGE_END":
            open_text.remove(e["messageId"])
            closed_text.add(e["messageId"])
        elif t == "TOOL_CALL_START":
            assert e["toolCallId"] not in calls and not open_text
            calls[e["toolCallId"]] = "started"
        elif t == "TOOL_CALL_ARGS":
            assert calls[e["toolCallId"]] == "started"
        elif t == "TOOL_CALL_END":
            assert calls[e["toolCallId"]] == "started"
            calls[e["toolCallId"]] = "ended"
        elif t == "TOOL_CALL_RESULT":
            assert calls.get(e["toolCallId"], "ended") == "ended"
            calls[e["toolCallId"]] = "answered"
        elif t in ("RUN_FINISHED", "RUN_ERROR"):
            assert not open_text, "every text message is closed before the run ends"
            assert all(s == "answered" for s in calls.values())


def text_of(events: list[dict[str, Any]], message_id: str) -> str:
    return "".join(
        e["delta"]
        for e in events
        if e["type"] == "TEXT_MESSAGE_CONTENT" and e["messageId"] == message_id
    )


@pytest.fixture
async def live(app: FastAPI, live_server: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        live_server(app) as base_url,
        httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client,
    ):
        yield client


async def test_agui_stream_of_a_loop_with_text_and_a_tool_call(
    live: httpx.AsyncClient,
    app: FastAPI,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
) -> None:
    script(fake_llm)
    r = await live.post(
        "/v1/loops",
        json={
            "agent": "calc",
            "message": "add 1 and 2",
            "state": {"llm": fake_llm.base_url, "stream": True, "tone": "dry"},
            "observe": False,  # so that `observed` below says the stream is connected
        },
    )
    lid = r.json()["id"]
    reader = asyncio.create_task(read_agui(live, lid))

    async def observed() -> bool:
        return bool((await live.get(f"/v1/loops/{lid}")).json()["observed"])

    await eventually(observed)  # connected before any turn is claimed
    async with running_engine(pool, database_url, registry, settings=settings):
        got = await asyncio.wait_for(reader, timeout=60)
    events = [e for _, e in got]
    check_order(events)

    started, snapshot, state = events[0], events[1], events[2]
    assert started["threadId"] == lid and started["runId"].startswith(f"{lid}:")
    assert started["protocolVersion"] == "1.0"
    assert [(m["role"], m["content"]) for m in snapshot["messages"]] == [("user", "add 1 and 2")]
    assert state["snapshot"]["tone"] == "dry"

    items = (await live.get(f"/v1/loops/{lid}/messages")).json()["items"]
    first, result, final = (m for m in items if m["role"] != "user")
    # The first reply's text, streamed, then its tool call, then the result, then the answer.
    assert text_of(events, str(first["id"])) == INTRO
    assert text_of(events, str(final["id"])) == ANSWER
    contents = [e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len([e for e in contents if e["messageId"] == str(final["id"])]) >= 2  # live deltas
    (call,) = first["tool_calls"]
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start == {
        **start,
        "toolCallId": str(call["id"]),
        "toolCallName": "add",
        "parentMessageId": str(first["id"]),
    }
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"a": 1, "b": 2}
    (res,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert res["toolCallId"] == str(call["id"]) and res["content"] == "3"
    assert res["messageId"] == str(result["id"])
    kinds = [e["type"] for e in events]
    assert kinds.index("TOOL_CALL_RESULT") < max(
        i for i, e in enumerate(events) if e.get("messageId") == str(final["id"])
    )
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["runId"] == started["runId"]
    assert finished["outcome"] == {"type": "success"}
    assert finished["metadata"]["agentd"]["status"] == "completed"
    # The run's model calls, per model, in AG-UI's accounting.
    (usage,) = finished["usage"]
    tokens = [m["tokens"] for m in (first, final)]
    assert usage["model"] == "fake-model"
    assert usage["inputTokens"] == sum(t["prompt"] for t in tokens) > 0
    assert usage["outputTokens"] == sum(t["completion"] for t in tokens) > 0
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
    ids = [i for i, _ in got]
    assert len(ids) == len(set(ids)) and ids[-1].endswith(".end")

    # Resume after the tool call's end: the same run goes on, no second RUN_STARTED.
    at = next(i for i, (_, e) in enumerate(got) if e["type"] == "TOOL_CALL_END")
    resumed = await read_agui(live, lid, {"Last-Event-ID": got[at][0]})
    rest = [e for _, e in resumed]
    check_order(rest, resumed=True)
    assert [e["type"] for e in rest if e["type"].startswith(("TOOL", "TEXT"))] == [
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    assert text_of(rest, str(final["id"])) == ANSWER
    assert rest[-1]["type"] == "RUN_FINISHED" and rest[-1]["runId"] == started["runId"]

    # Resume in the middle of the streamed answer: the rest of its text, exactly once.
    mid = next(
        i
        for i, (_, e) in enumerate(got)
        if e["type"] == "TEXT_MESSAGE_CONTENT" and e["messageId"] == str(final["id"])
    )
    tail = [e for _, e in await read_agui(live, lid, {"Last-Event-ID": got[mid][0]})]
    assert "TEXT_MESSAGE_START" not in [e["type"] for e in tail]
    assert [e["type"] for e in tail if e["type"].startswith("TEXT")][-1] == "TEXT_MESSAGE_END"
    assert tail[-1]["type"] == "RUN_FINISHED"
    sent_before = text_of([e for _, e in got[: mid + 1]], str(final["id"]))
    assert sent_before + text_of(tail, str(final["id"])) == ANSWER

    # After the run's last event with nothing new: 204, so an EventSource stops.
    r = await live.get(
        f"/v1/loops/{lid}/stream",
        params={"protocol": "ag-ui"},
        headers={"Last-Event-ID": ids[-1]},
    )
    assert r.status_code == 204
    r = await live.get(
        f"/v1/loops/{lid}/stream", params={"protocol": "ag-ui"}, headers={"Last-Event-ID": "m3"}
    )
    assert r.status_code == 400 and r.json()["type"].endswith("invalid-last-event-id")
    assert (await live.get(f"/v1/loops/{lid}/stream", params={"protocol": "x"})).status_code == 422
    assert app.state.stream_hub.subscribers() == 0


async def test_agui_run_of_a_paused_loop_ends_with_an_interrupt(
    live: httpx.AsyncClient,
) -> None:
    r = await live.post("/v1/loops", json={"agent": "calc", "message": "hi"})
    lid = r.json()["id"]
    await live.post(f"/v1/loops/{lid}/pause")
    events = [e for _, e in await read_agui(live, lid)]
    check_order(events)
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
    (interrupt,) = finished["outcome"]["interrupts"]
    assert finished["outcome"]["type"] == "interrupt"
    assert interrupt["reason"] == "paused_by_user"


async def test_agui_run_of_a_stopped_loop_is_cancelled_and_a_failed_one_an_error(
    live: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
) -> None:
    r = await live.post("/v1/loops", json={"agent": "calc", "message": "hi", "observe": False})
    lid = r.json()["id"]
    reader = asyncio.create_task(read_agui(live, lid))

    async def observed() -> bool:
        return bool((await live.get(f"/v1/loops/{lid}")).json()["observed"])

    await eventually(observed)
    assert (await live.post(f"/v1/loops/{lid}/stop")).status_code == 200
    events = [e for _, e in await asyncio.wait_for(reader, timeout=20)]
    check_order(events)
    assert events[-1]["outcome"] == {"type": "cancelled"}

    fake_llm.add(Rule(reply=Reply(status=400, error_body={"error": "bad request"})))
    r = await live.post(
        "/v1/loops", json={"agent": "calc", "message": "hi", "state": {"llm": fake_llm.base_url}}
    )
    failing = r.json()["id"]
    async with running_engine(pool, database_url, registry, settings=settings):

        async def failed() -> bool:
            return (await live.get(f"/v1/loops/{failing}")).json()["status"] == "failed"

        await eventually(failed)
    events = [e for _, e in await read_agui(live, failing)]
    check_order(events)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "turn_failed"
    assert events[-1]["message"]


async def test_agui_run_waits_for_an_approval_and_goes_on_once_decided(
    live: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
) -> None:
    fake_llm.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(tool_calls=[ToolCall("refund", {"amount": 42})]),
        )
    )
    fake_llm.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))
    r = await live.post(
        "/v1/loops",
        json={"agent": "calc", "message": "refund me", "state": {"llm": fake_llm.base_url}},
    )
    lid = r.json()["id"]
    reader = asyncio.create_task(read_agui(live, lid))

    async def pending() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (await live.get(f"/v1/loops/{lid}/approvals")).json()["items"]
        return items

    async with running_engine(pool, database_url, registry, settings=settings):
        (call,) = await eventually(pending)
        assert not reader.done()  # a run waiting for a person stays open
        r = await live.post(f"/v1/tool-calls/{call['id']}/approve")
        assert r.status_code == 200
        events = [e for _, e in await asyncio.wait_for(reader, timeout=30)]
    check_order(events)
    customs = [e for e in events if e["type"] == "CUSTOM"]
    waiting = {"reason": "awaiting_approval", "status_reason": "awaiting_approval"}
    assert {"status": "waiting", **waiting} in [
        c["value"] for c in customs if c["name"] == "agentd.status"
    ]
    (decided,) = [c for c in customs if c["name"] == "agentd.approval"]
    assert decided["value"]["tool_call_id"] == call["id"]
    types = [e["type"] for e in events]
    assert types.index("CUSTOM") < types.index("TOOL_CALL_RESULT")
    (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == str(call["id"]) and result["content"] == "refunded 42"
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}


async def test_agui_run_resumed_mid_answer_goes_on_streaming_from_the_next_character(
    live: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    settings: Settings,
    fake_llm: FakeLLM,
) -> None:
    """A dropped connection in the middle of a streamed answer: the resumed stream keeps
    sending TEXT_MESSAGE_CONTENT live (deltas carry offsets), each character once."""
    long = "Counting the numbers one by one, slowly. " * 12
    fake_llm.add(Rule(reply=Reply(content=long, chunk_size=4, chunk_delay=0.04)))
    r = await live.post(
        "/v1/loops",
        json={
            "agent": "calc",
            "message": "count",
            "state": {"llm": fake_llm.base_url, "stream": True},
        },
    )
    lid = r.json()["id"]
    first: list[tuple[str, dict[str, Any]]] = []
    async with running_engine(pool, database_url, registry, settings=settings):
        event_id = ""
        async with live.stream(
            "GET", f"/v1/loops/{lid}/stream", params={"protocol": "ag-ui"}
        ) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    first.append((event_id, json.loads(line[6:])))
                    if sum(e["type"] == "TEXT_MESSAGE_CONTENT" for _, e in first) >= 3:
                        break
        rest = [e for _, e in await read_agui(live, lid, {"Last-Event-ID": first[-1][0]})]
    message_id = next(e["messageId"] for _, e in first if e["type"] == "TEXT_MESSAGE_START")
    assert "TEXT_MESSAGE_START" not in [e["type"] for e in rest]  # the same message goes on
    before = text_of([e for _, e in first], message_id)
    after = text_of(rest, message_id)
    assert before + after == long
    # Live deltas after the resume, not only the committed remainder in one piece.
    assert sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in rest) >= 2

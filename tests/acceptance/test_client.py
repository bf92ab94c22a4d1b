"""agentd.client against a real `agentd up` (a subprocess on the test database) and the
scripted fake model in this process."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.client import AsyncClient, Client, errors
from agentd.client.models import StreamEvent
from agentd.testing.engine import eventually
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.up import AgentdUp, TcpProxy

pytestmark = [pytest.mark.acceptance]

CONFIG = '[agents.calc]\nclass = "agentd.testing.agents:CalcAgent"\n'


def script(fake: FakeLLM, *, delay: float = 0.0) -> None:
    """user -> add(1,2) -> add(3,4) -> the answer; or, asked for a refund, refund(5)."""
    slow = {"delay_before_first_byte": delay}
    fake.add(
        Rule(
            match="refund",
            reply=Reply(tool_calls=[ToolCall("refund", {"amount": 5})]),
        )
    )
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(content="first", tool_calls=[ToolCall("add", {"a": 1, "b": 2})], **slow),
        )
    )
    fake.add(
        Rule(
            match=lambda last: last.role == "tool" and last.text == "3",
            reply=Reply(content="second", tool_calls=[ToolCall("add", {"a": 3, "b": 4})], **slow),
        )
    )
    fake.add(Rule(match=None, reply=Reply(content="done: 3 and 7", **slow)))


@pytest.fixture
async def fake() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as f:
        yield f


@pytest.fixture
async def up(database_url: str, tmp_path: Path) -> AsyncIterator[AgentdUp]:
    config = tmp_path / "agentd.toml"
    config.write_text(CONFIG)
    async with AgentdUp(database_url=database_url, config=config) as proc:
        yield proc


async def test_async_client_drives_a_loop_end_to_end(up: AgentdUp, fake: FakeLLM) -> None:
    script(fake)
    async with AsyncClient(up.base_url, up.token) as agentd:
        assert [a["name"] for a in await agentd.agents()] == ["calc"]
        key = str(uuid.uuid4())
        loop = await agentd.start(
            "calc", "add please", state={"llm": fake.base_url}, idempotency_key=key
        )
        assert loop.agent == "calc" and loop.status in ("queued", "running")
        # A retry with the key is the same loop; the key with another body is refused.
        retried = await agentd.start(
            "calc", "add please", state={"llm": fake.base_url}, idempotency_key=key
        )
        assert retried.id == loop.id
        with pytest.raises(errors.BadRequest) as reused:
            await agentd.start("calc", "something else", idempotency_key=key)
        assert reused.value.problem_type == "idempotency-key-reused"
        events = [e async for e in agentd.stream(loop.id)]
        assert events[-1].event == "status" and events[-1].data["status"] == "completed"
        msgs = await agentd.messages(loop.id)
        assert [m.role for m in msgs] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        assert msgs[-1].content == "done: 3 and 7"
        assert msgs[1].tool_calls[0].name == "add" and msgs[1].tool_calls[0].result == "3"
        assert (await agentd.get(loop.id)).status == "completed"

        page = await agentd.events(loop.id, limit=2)
        assert len(page.items) == 2 and page.next_cursor is not None
        rest = await agentd.events(loop.id, after=int(page.next_cursor), limit=1000)
        ids = [e.id for e in page.items + rest.items]
        assert ids == sorted(set(ids))

        # fork at the first answer, then regenerate the fork from there
        forked = await agentd.fork(loop.id, msgs[1].id, title="copy")
        assert forked.status == "paused" and forked.id != loop.id
        again = await agentd.regenerate(loop.id, msgs[1].id)
        assert again.id == loop.id

        # lifecycle on a loop that parks for an approval
        parked = await agentd.start("calc", "refund me", state={"llm": fake.base_url})

        async def waiting() -> list[object]:
            return list(await agentd.approvals(parked.id))

        (call,) = await eventually(waiting, within=30)
        assert call.name == "refund" and call.approval_status == "pending"
        assert (await agentd.pause(parked.id)).status == "paused"
        assert (await agentd.freeze(parked.id)).frozen
        assert not (await agentd.unfreeze(parked.id)).frozen
        denied = await agentd.deny(call.id, reason="not today")
        assert denied.approval_status == "denied"
        with pytest.raises(errors.Conflict) as conflict:
            await agentd.approve(call.id)
        assert conflict.value.status == 409 and conflict.value.detail
        assert (await agentd.stop(parked.id)).status == "stopped"

        # cursors: three loops (the first, its fork, the parked one), pages of two
        page1 = await agentd.list(agent="calc", limit=2)
        assert len(page1.items) == 2 and page1.next_cursor
        seen = [lp.id async for lp in agentd.iter_loops(agent="calc", page_size=2)]
        assert len(seen) == len(set(seen)) == 3  # every loop once
        assert set(seen) == {loop.id, forked.id, parked.id}
        assert seen[:2] == [lp.id for lp in page1.items]

        # typed errors from problem+json
        with pytest.raises(errors.NotFound) as missing:
            await agentd.get(uuid.uuid4())
        assert missing.value.problem_type == "loop-not-found"
        with pytest.raises(errors.BadRequest):
            await agentd.start("calc", "")
    async with AsyncClient(up.base_url, "wrong-token") as stranger:
        with pytest.raises(errors.Unauthorized):
            await stranger.list()


async def test_stream_resumes_after_a_dropped_connection_without_duplicates(
    up: AgentdUp, fake: FakeLLM
) -> None:
    script(fake, delay=0.5)  # each turn takes a while: the cut lands mid-loop
    proxy = TcpProxy(("127.0.0.1", up.port))
    async with proxy, AsyncClient(f"http://127.0.0.1:{proxy.port}", up.token) as agentd:
        loop = await agentd.start("calc", "add please", state={"llm": fake.base_url})
        events: list[StreamEvent] = []
        async for event in agentd.stream(loop.id):
            events.append(event)
            if event.event == "message" and proxy.cuts == 0:
                proxy.cut()  # the connection drops under the reader
        msgs = await agentd.messages(loop.id)
    assert proxy.cuts == 1
    streamed = [e.data["id"] for e in events if e.event == "message"]
    assert len(streamed) == len(set(streamed))  # nothing twice
    assert set(streamed) == {m.id for m in msgs if m.role != "user"}  # nothing missed
    statuses = [e.data["status"] for e in events if e.event == "status"]
    assert statuses[-1] == "completed" and statuses.count("completed") == 1


async def test_sync_client_streams_and_raises_typed_errors(up: AgentdUp, fake: FakeLLM) -> None:
    script(fake)

    def drive() -> tuple[list[StreamEvent], list[str]]:
        with Client(up.base_url, up.token) as agentd:
            loop = agentd.start("calc", "add please", state={"llm": fake.base_url})
            events = list(agentd.stream(loop.id))
            roles = [m.role for m in agentd.messages(loop.id)]
            with pytest.raises(errors.NotFound):
                agentd.pause(uuid.uuid4())
            return events, roles

    events, roles = await asyncio.to_thread(drive)  # the fake model answers on this loop
    assert events[-1].data["status"] == "completed"
    assert roles[-1] == "assistant" and len(roles) == 6


async def test_a_loop_started_with_the_client_streams_tokens_from_its_first_turn(
    up: AgentdUp, fake: FakeLLM
) -> None:
    answer = "Streaming from the very first token: " + " ".join(str(i) for i in range(40))
    fake.add(Rule(match=None, reply=Reply(content=answer, chunk_size=5, chunk_delay=0.02)))
    async with AsyncClient(up.base_url, up.token) as agentd:
        loop = await agentd.start("calc", "count", state={"llm": fake.base_url, "stream": True})
        events = [e async for e in agentd.stream(loop.id)]
    (final,) = [e.message for e in events if e.event == "message"]
    assert final is not None and final.content == answer
    text = "".join(e.delta for e in events if e.event == "delta")
    assert len([e for e in events if e.event == "delta"]) >= 2
    assert text and answer.startswith(text) and text.startswith("Streaming")

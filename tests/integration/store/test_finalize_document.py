"""The two finalizes take one jsonb document (loops.finalize_turn_all, tool_calls.finish):
awkward values (NULLs, unicode, text that is valid JSON, nested json, large ints, floats)
are stored exactly as given."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from agentd.db import storable
from agentd.db.pool import Pool, connection
from agentd.engine.lifecycle import Lifecycle
from agentd.store import jobs, loops, tool_calls
from agentd.store.models import NewEvent
from agentd.testing import agents
from agentd.testing.engine import fast_settings

JSON_TEXT = '{"a": [1, 2.5, null], "b": "x"}'  # text that parses as JSON: must stay text
UNICODE = 'naïve 😀 \u202ertl\u202c \u2028 日本語 \\u0000 \\ud800 "q" \\n \x00 \ud83d'
# A NUL and a lone surrogate are stored as U+FFFD, as by every text parameter.
STORED = storable.text(UNICODE)
assert STORED != UNICODE and "\\u0000" in STORED
NESTED: dict[str, Any] = {
    "big": 2**70,
    "neg": -(2**63),
    "f": 0.1,
    "tiny": 5e-324,
    "frac": -12345.678901234567,  # (an integral float, 1e300, comes back an int: jsonb)
    "none": None,
    "s": JSON_TEXT,
    "ü😀": [[], {}, [None, True, False, {"deep": [1, {"k": "v"}]}]],
}


async def _running_loop(pool: Pool) -> tuple[uuid.UUID, uuid.UUID]:
    lifecycle = Lifecycle(pool, agents.registry(), fast_settings())
    started = await lifecycle.start(agent="calc", message="hi", state={"llm": "http://x"})
    token = uuid.uuid4()
    async with connection(pool) as conn:
        got = await jobs.claim_llm(
            conn, execution_token=token, worker_id=uuid.uuid4(), default_lease=30.0
        )
    assert got is not None and got.loop is not None and got.loop.id == started.id
    return started.id, token


def _event(loop_id: uuid.UUID, **kw: Any) -> NewEvent:
    return NewEvent(loop_id=loop_id, **kw)


async def test_turn_and_tool_finalize_round_trip_awkward_values(pool: Pool) -> None:
    loop_id, token = await _running_loop(pool)
    worker = uuid.uuid4()
    own = [uuid.uuid4(), uuid.uuid4()]
    calls = [
        {
            "position": 0,
            "provider_call_id": "call_😀",
            "name": "add",
            "arguments": NESTED,
            "arguments_raw": JSON_TEXT,
            "metadata": {"m": NESTED},
        },
        {
            "position": 1,
            "provider_call_id": "c2",
            "name": "add",
            "arguments": JSON_TEXT,  # a json string value, not an object
            "arguments_raw": UNICODE,
            "metadata": {},
        },
    ]
    turn_events = [
        _event(
            loop_id,
            name="llm.request",
            reason=UNICODE,
            http_method="POST",
            url=None,
            status=2**31 - 1,
            request_data={"n": NESTED},
            response_data=JSON_TEXT,  # a json string
            duration=0.30000000000000004,
            log=JSON_TEXT,
        ),
        _event(loop_id, name="llm.turn"),
    ]
    async with connection(pool) as conn:
        done = await loops.finalize_turn_all(
            conn,
            loop_id=loop_id,
            execution_token=token,
            tokens=(2**31 - 1, 7, 0),
            estimated=True,
            shell_message_id=None,
            message={
                "content": JSON_TEXT,
                "reasoning": UNICODE,
                "metadata": NESTED,
                "ttft": 1e-7,
                "duration": 123456.789012345,
                "finish_reason": None,
            },
            calls=calls,
            sequential=False,
            tool_lease_seconds=30.0,
            notify_tool=False,
            turn_events=turn_events,
            attach=[False, True],
            own_tokens=own,
            worker_id=worker,
            cost=Decimal("0.0000000001"),
            tokens_reasoning=3,
            generation_seconds=0.1,
        )
        assert done is not None
        assert [c.lease_token for c in done.leased_calls] == own
        lp = await conn.fetchrow("SELECT * FROM loops WHERE id = $1", loop_id)
        msg = await conn.fetchrow("SELECT * FROM messages WHERE id = $1", done.message_id)
        tcs = await conn.fetch(
            "SELECT * FROM tool_calls WHERE loop_id = $1 ORDER BY position", loop_id
        )
        evs = await conn.fetch("SELECT * FROM events WHERE loop_id = $1 ORDER BY id", loop_id)

    assert lp["status"] == "running" and lp["execution_token"] == token
    assert lp["cost"] == Decimal("0.0000000001") and lp["cost_unpriced_turns"] == 0
    assert lp["tokens_estimated"] is True and lp["tokens_reasoning"] == 3
    assert lp["ttft_total"] == 1e-7 and lp["ttft_turns"] == 1
    assert lp["generation_seconds"] == 0.1 and lp["generation_tokens"] == 7
    assert msg["content"] == JSON_TEXT and msg["reasoning"] == STORED
    assert msg["metadata"] == NESTED and msg["finish_reason"] is None
    assert msg["ttft"] == 1e-7 and msg["duration"] == 123456.789012345
    assert msg["tokens_prompt"] == 2**31 - 1 and msg["execution_token"] == token
    assert [
        (t["provider_call_id"], t["arguments"], t["arguments_raw"], t["metadata"]) for t in tcs
    ] == [("call_😀", NESTED, JSON_TEXT, {"m": NESTED}), ("c2", JSON_TEXT, STORED, {})]
    assert [(t["status"], t["lease_token"], t["lease_worker_id"]) for t in tcs] == [
        ("running", own[0], worker),
        ("running", own[1], worker),
    ]
    first, attached = evs[-2], evs[-1]
    assert (first["reason"], first["url"], first["status"], first["log"]) == (
        STORED,
        None,
        2**31 - 1,
        JSON_TEXT,
    )
    assert first["request_data"] == {"n": NESTED} and first["response_data"] == JSON_TEXT
    assert first["duration"] == 0.30000000000000004 and first["message_id"] is None
    assert attached["message_id"] == done.message_id and attached["request_data"] is None
    assert attached["log"] == '{"step": 1, "tool_calls": 2}'

    # The end of call 0 from the document, with a checkpoint of awkward values.
    checkpoint = tool_calls.Checkpoint(
        result=JSON_TEXT, structured=NESTED, is_success=False, error_message=UNICODE,
        duration=2.5e-5,
    )  # fmt: skip

    async def finish(conn: Any, **varying: Any) -> tool_calls.Finished | None:
        return await tool_calls.finish(
            conn,
            tool_call_id=tcs[0]["id"],
            loop_id=loop_id,
            lease_token=own[0],
            generation=token,
            sequential=False,
            new_token=uuid.uuid4(),
            status_reason="tool_results",
            llm_lease_seconds=30.0,
            tool_lease_seconds=30.0,
            notify_llm=False,
            notify_tool=False,
            **varying,
        )

    async with connection(pool) as conn:
        fin = await finish(
            conn,
            checkpoint=checkpoint,
            call_events=[
                _event(loop_id, name="tool.result", response_data=NESTED, log=UNICODE),
                _event(loop_id, name="tool.done", tool_call_id=tcs[0]["id"]),
            ],
            attach=[False, True],
        )
        assert fin is not None and fin.tool_jobs == 0 and fin.llm_jobs == 0
        call = await conn.fetchrow("SELECT * FROM tool_calls WHERE id = $1", tcs[0]["id"])
        reply = await conn.fetchrow("SELECT * FROM messages WHERE id = $1", fin.message_id)
        tool_evs = await conn.fetch(
            "SELECT * FROM events WHERE loop_id = $1 AND name LIKE 'tool.%' ORDER BY id", loop_id
        )
        # A second end of the same call loses its fence and writes nothing.
        again = await finish(
            conn, checkpoint=None, call_events=[_event(loop_id, name="tool.never")], attach=[False]
        )
        assert again is None
        assert not await conn.fetchval("SELECT count(*) FROM events WHERE name = 'tool.never'")

    assert (call["result"], call["structured_result"], call["error_message"]) == (
        JSON_TEXT,
        NESTED,
        STORED,
    )
    assert call["is_success"] is False and call["status"] == "failed"
    assert call["duration"] == 2.5e-5 and call["executed_at"] == fin.executed_at
    assert call["response_message_id"] == fin.message_id and call["lease_token"] is None
    assert reply["content"] == JSON_TEXT and reply["role"] == "tool"
    assert [(e["name"], e["response_data"], e["log"], e["message_id"]) for e in tool_evs] == [
        ("tool.result", NESTED, STORED, None),
        ("tool.done", None, None, fin.message_id),
    ]

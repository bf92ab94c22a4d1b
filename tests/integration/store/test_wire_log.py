"""The wire log stores each request as sent, as a reference to its loop's shared parts
(pipeline/wire.py, sql/functions/wire_parts.sql): reading it back rebuilds the exact bytes and the
SHA-256 recorded when they were sent verifies them — across prompts that extend, get
compacted, regenerated or forked, turns that rolled back, and a process that lost its
hints — while each turn writes only its new pieces; secrets are stored redacted."""

from __future__ import annotations

import dataclasses
import hashlib
import random
import uuid
from typing import Any

import pytest

from agentd import redact
from agentd.db.pool import Pool, connection, transaction
from agentd.engine.wire_hints import WireHints
from agentd.llm import body
from agentd.llm.types import WireExchange
from agentd.pipeline import wire
from agentd.store import events
from agentd.store.models import NewEvent
from agentd.testing import factories

ALPHABET = 'abcdefghijklmnopqrstuvwxyz 0123456789"\\\n\té€😀/<>{}[],:'


def text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, n)))


def message(rng: random.Random, i: int) -> dict[str, Any]:
    role = rng.choice(["assistant", "tool", "user"])
    if role == "assistant":
        return {
            "role": "assistant",
            "content": text(rng, 80) or None,
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": "echo", "arguments": body.dumps({"t": text(rng, 40)})},
                }
            ],
        }
    return {"role": role, "content": text(rng, 200), "n": rng.random() * 1e6}


def exchange(payload: dict[str, Any], attempt: int = 1) -> WireExchange:
    return WireExchange(
        attempt=attempt,
        method="POST",
        url="http://model/v1/chat/completions",
        request_headers={"content-type": "application/json"},
        request_body=None,
        request_wire=body.encode(payload),
        status=200,
        response_body="{}",
    )


async def store(pool: Pool, evs: list[NewEvent]) -> None:
    async with transaction(pool) as conn:
        await events.insert_many(conn, evs)


async def test_100_random_requests_rebuild_byte_for_byte(pool: Pool) -> None:
    rng = random.Random(20261201)
    hints = WireHints()
    async with connection(pool) as conn:
        loops = [(await factories.loop(conn)).id for _ in range(3)]
    transcripts: dict[uuid.UUID, list[dict[str, Any]]] = {
        lid: [{"role": "system", "content": "be brief"}] for lid in loops
    }
    sent: dict[str, bytes] = {}  # sha256 of each committed request -> its bytes
    for turn in range(160):
        lid = rng.choice(loops)
        msgs = transcripts[lid]
        op = rng.random()
        if op < 0.08 and len(msgs) > 6:  # compaction: [system, summary, tail]
            summary = {"role": "user", "content": "summary " + text(rng, 50)}
            msgs[:] = [msgs[0], summary, *msgs[-3:]]
        elif op < 0.14 and len(msgs) > 4:  # regenerate: drop the newest few
            del msgs[-rng.randint(1, 3) :]
        msgs.extend(message(rng, turn) for _ in range(rng.randint(1, 3)))
        payload: dict[str, Any] = {"model": "m", "messages": list(msgs), "stream": False}
        if rng.random() < 0.5:
            payload["tools"] = [{"type": "function", "function": {"name": "echo"}}]
        if rng.random() < 0.1:
            payload["temperature"] = rng.random()
        token = uuid.uuid4()
        attempts = [exchange(payload, a) for a in range(1, rng.choice([1, 1, 1, 2]) + 1)]
        evs = wire.llm_events(attempts, loop_id=lid, hints=hints, token=token)
        if rng.random() < 0.07:  # the turn rolled back: nothing stored, nothing learnt
            hints.settle(lid, token, committed=False)
            continue
        await store(pool, evs)
        hints.settle(lid, token, committed=True)
        data = attempts[0].request_wire.data
        sent[hashlib.sha256(data).hexdigest()] = data
        if rng.random() < 0.05:
            hints.forget()  # a restart: the next request of each loop is self-contained
    got: list[tuple[dict[str, Any], events.Rebuilt]] = []
    async with connection(pool) as conn:
        for lid in loops:
            parts = await events.wire_parts(conn, loop_id=lid)
            memo: dict[str, list[str]] = {}
            rows = await events.list_(conn, loop_id=lid, limit=1000, rebuild=False)
            for e in rows:
                ref = e.request_data["body_ref"]
                assert "parts" not in e.request_data and "body" not in e.request_data
                got.append((ref, events.rebuild(ref, parts, memo)))
    assert len(got) >= 100
    for ref, r in rng.sample(got, 100):
        assert r.text is not None and r.verified, ref
        assert r.text.encode() == sent[ref["sha256"]]
        assert hashlib.sha256(r.text.encode()).hexdigest() == ref["sha256"]


async def test_each_turn_stores_only_its_new_pieces(pool: Pool) -> None:
    hints = WireHints()
    async with connection(pool) as conn:
        lid = (await factories.loop(conn)).id
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    new_parts = []
    sent_total = 0  # what storing every request whole would take: quadratic in the length
    for i in range(200):
        msgs += [{"role": "assistant", "content": f"a{i} " * 20}, {"role": "tool", "content": "t"}]
        token = uuid.uuid4()
        evs = wire.llm_events(
            [exchange({"model": "m", "messages": list(msgs)})],
            loop_id=lid,
            hints=hints,
            token=token,
        )
        new_parts.append(len(evs[0].request_data["parts"]))
        sent_total += len(body.encode({"model": "m", "messages": msgs}).data)
        await store(pool, evs)
        hints.settle(lid, token, committed=True)
    # Two new messages (one deduplicated when equal), the tail, the manifest: O(1).
    assert max(new_parts[1:]) <= 4
    async with connection(pool) as conn:
        stored = await conn.fetchval(
            "SELECT (SELECT sum(pg_column_size(e.*)) FROM events e WHERE loop_id = $1)"
            " + (SELECT sum(pg_column_size(p.*)) FROM wire_parts p WHERE loop_id = $1)",
            lid,
        )
        first, last = await conn.fetchrow(
            "SELECT (array_agg(pg_column_size(e.*) ORDER BY id))[1],"
            " (array_agg(pg_column_size(e.*) ORDER BY id DESC))[1] FROM events e"
            " WHERE loop_id = $1",
            lid,
        )
    assert last <= 2 * max(first, 300)  # the 200th request's row is no bigger than the 1st's
    assert stored < sent_total / 10  # linear in the transcript, not quadratic


async def test_secrets_are_stored_redacted_and_flagged(pool: Pool) -> None:
    hints = WireHints()
    async with connection(pool) as conn:
        lid = (await factories.loop(conn)).id
    secret = "sk-" + "A1b2C3d4E5f6G7h8"
    msgs = [
        {"role": "user", "content": f"my key is {secret}"},
        {"role": "tool", "content": "Authorization: Bearer abc.def.ghi", "password": "hunter2"},
    ]
    for i in range(3):
        token = uuid.uuid4()
        msgs.append({"role": "assistant", "content": f"ok {i}"})
        evs = wire.llm_events(
            [exchange({"model": "m", "messages": list(msgs)})],
            loop_id=lid,
            hints=hints,
            token=token,
        )
        await store(pool, evs)
        hints.settle(lid, token, committed=True)
    async with connection(pool) as conn:
        leaked = await conn.fetchval(
            "SELECT count(*) FROM wire_parts WHERE body LIKE '%A1b2C3d4%'"
            " OR body LIKE '%abc.def.ghi%' OR body LIKE '%hunter2%'"
        )
        rows = await events.list_(conn, loop_id=lid)
    assert leaked == 0
    for e in rows:
        ref = e.request_data["body_ref"]
        assert ref["redacted"] is True and ref["verified"] is True  # against what is stored
        assert redact.MASK in e.request_data["body"]["messages"][0]["content"]
        assert e.request_data["body"]["messages"][1]["password"] == redact.MASK


async def test_a_calls_literal_secret_is_masked_in_the_pieces_too(pool: Pool) -> None:
    """The provider key a call was given (`request_secrets`) is masked wherever it echoes,
    even in a shape no pattern knows and with no process-wide record of it."""
    hints = WireHints()
    async with connection(pool) as conn:
        lid = (await factories.loop(conn)).id
    literal = "plain-literal-key-0042"
    ex = dataclasses.replace(
        exchange({"model": "m", "messages": [{"role": "user", "content": f"echo {literal}"}]}),
        request_secrets=(literal,),
    )
    await store(pool, wire.llm_events([ex], loop_id=lid, hints=hints, token=uuid.uuid4()))
    async with connection(pool) as conn:
        leaked = await conn.fetchval(
            "SELECT count(*) FROM wire_parts WHERE body LIKE '%plain-literal-key%'"
        )
        (e,) = await events.list_(conn, loop_id=lid)
    assert leaked == 0
    assert e.request_data["body"]["messages"][0]["content"] == f"echo {redact.MASK}"


async def test_old_form_rows_read_as_they_are(pool: Pool) -> None:
    """A worker of the previous release stores the payload whole: readers show it as is."""
    async with connection(pool) as conn:
        lid = (await factories.loop(conn)).id
    old = {"headers": {}, "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    await store(pool, [NewEvent(name="llm.request", loop_id=lid, request_data=old)])
    async with connection(pool) as conn:
        (e,) = await events.list_(conn, loop_id=lid)
    assert e.request_data == old


async def test_a_missing_part_reads_as_unavailable_not_an_error(pool: Pool) -> None:
    hints = WireHints()
    async with connection(pool) as conn:
        lid = (await factories.loop(conn)).id
    evs = wire.llm_events(
        [exchange({"model": "m", "messages": [{"role": "user"}]})], loop_id=lid, hints=hints
    )
    await store(pool, evs)
    async with connection(pool) as conn:
        await conn.execute("DELETE FROM wire_parts WHERE loop_id = $1", lid)
        (e,) = await events.list_(conn, loop_id=lid)
    assert e.request_data["body"] is None
    assert e.request_data["body_ref"]["available"] is False
    assert e.request_data["body_ref"]["verified"] is False


def test_a_request_extending_the_last_is_stored_as_a_piece_by_piece_pass_stores_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """wire.encode skips the pieces a body shares with the hint (body.split's `same`): the
    reference, the parts and the next hint are exactly those of the pass over every piece —
    through extensions, compactions, regenerations, secrets and restarts."""
    rng = random.Random(20261202)
    hints = WireHints()
    lid = uuid.uuid4()
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    split = body.split
    fast = 0
    for turn in range(300):
        op = rng.random()
        if op < 0.08 and len(msgs) > 6:
            msgs[:] = [msgs[0], {"role": "user", "content": "summary"}, *msgs[-3:]]
        elif op < 0.14 and len(msgs) > 4:
            del msgs[-rng.randint(1, 3) :]
        msgs.extend(message(rng, turn) for _ in range(rng.randint(0, 3)))
        if rng.random() < 0.05:
            msgs.append({"role": "user", "content": "my key is sk-A1b2C3d4E5f6G7h8I9"})
        if rng.random() < 0.05:
            msgs.append(dict(msgs[-1]))  # a piece equal to the one before it
        payload = {"model": "m", "messages": list(msgs), "stream": False}
        hint = hints.get(lid)
        ex = exchange(payload)
        got_parts: dict[str, str] = {}
        got, got_hint = wire.encode(ex, parts=got_parts, hint=hint)
        with monkeypatch.context() as m:
            m.setattr(body, "split", lambda b, known=None: (split(b, known)[0], 0))
            want_parts: dict[str, str] = {}
            want, want_hint = wire.encode(ex, parts=want_parts, hint=hint)
        fast += split(ex.request_wire, hint.texts[:-1] if hint else None)[1] > 0
        assert got == want and got_parts == want_parts, turn
        if not got["redacted"]:
            assert got["sha256"] == hashlib.sha256(ex.request_wire.data).hexdigest()
        for f in ("manifest", "pieces", "texts", "safe", "where"):
            assert getattr(got_hint, f) == getattr(want_hint, f), (turn, f)
        assert want_hint.sent.items() <= got_hint.sent.items()  # a hint may know more
        token = uuid.uuid4()
        wire.llm_events([ex], loop_id=lid, hints=hints, token=token)
        hints.settle(lid, token, committed=True)
        if rng.random() < 0.03:
            hints.forget()
    assert fast > 150

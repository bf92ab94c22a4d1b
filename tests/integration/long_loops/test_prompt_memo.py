"""The worker's memo of a loop's prompt (pipeline/llm/prompt.py `Last`, engine/history_cache.py
`_extend`): a prompt that extends the last one is built from its new rows alone, and every
prompt — extended, or after any change to earlier rows or calls — is the one a build
without a memo gives; the cache's entry after a delta is the one a full record gives."""

from __future__ import annotations

import dataclasses
import random
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from agentd.engine import transcript
from agentd.engine.history_cache import HistoryCache
from agentd.pipeline.llm import prompt
from agentd.store.models import Message as MessageRow
from agentd.store.models import ToolCall as CallRow

NOW = datetime.now(UTC)
LOOP = uuid.uuid4()
ROW = dict(loop_id=LOOP, reasoning=None, hidden=False, status="completed", step=None,
           execution_token=None, metadata={}, tokens_prompt=None, tokens_completion=None,
           tokens_cached=None, ttft=None, duration=None, finish_reason=None,
           error_message=None, created_at=NOW, updated_at=NOW)  # fmt: skip
CALL = {f: None for f in CallRow.__dataclass_fields__}


class Ids:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


def row(ids: Ids, role: str, content: str = "", **kw: Any) -> MessageRow:
    fields = {**ROW, "tool_call_id": None, **kw}
    return MessageRow(id=ids(), role=role, content=content, **fields)


def call(ids: Ids, message: MessageRow, position: int = 0, **kw: Any) -> CallRow:
    cid = ids()
    fields = {**CALL, "id": cid, "loop_id": LOOP, "message_id": message.id,
              "position": position, "provider_call_id": f"c{cid}", "name": "add",
              "arguments": {"a": cid}, "metadata": {}, "is_success": True, **kw}  # fmt: skip
    return CallRow(**fields)


def test_an_extending_prompt_renders_only_its_new_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = Ids()
    rows = [row(ids, "user", "go")]
    calls: list[CallRow] = []
    memo = transcript.Rendered()
    built: list[int] = []
    original = prompt._render

    def counting(s: str, summary: Any, rs: list[MessageRow], cs: list[CallRow]) -> Any:
        built.extend(r.id for r in rs)
        return original(s, summary, rs, cs)

    monkeypatch.setattr(prompt, "_render", counting)
    for i in range(50):
        built.clear()
        got = prompt.render("sys", None, rows, calls, memo=memo)
        assert got == original("sys", None, rows, calls)
        assert built == ([rows[0].id] if i == 0 else [r.id for r in rows[-2:]])
        asked = row(ids, "assistant")
        c = call(ids, asked)
        rows = [*rows, asked, row(ids, "tool", f"r{i}", tool_call_id=c.id)]
        calls = [*calls, c]
    # The messages of earlier rows are the very objects of the previous prompt.
    again = prompt.render("sys", None, rows, calls, memo=memo)
    assert all(a is b for a, b in zip(got, again, strict=False))


def test_random_prompts_with_a_memo_are_the_prompts_without_one() -> None:
    rng = random.Random(20261202)
    ids = Ids()
    rows: list[MessageRow] = [row(ids, "user", "go")]
    calls: list[CallRow] = []
    summary: MessageRow | None = None
    system = "sys"
    memo = transcript.Rendered()
    for step in range(600):
        op = rng.random()
        if op < 0.35:  # a round: an answer with calls, and (mostly) their results
            asked = row(ids, "assistant", rng.choice(["", "thinking"]))
            new = [call(ids, asked, p) for p in range(rng.randint(0, 2))]
            rows.append(asked)
            calls.extend(new)
            for c in new:
                if rng.random() < 0.8:
                    rows.append(row(ids, "tool", "ok", tool_call_id=c.id))
        elif op < 0.45:  # a result arriving later, for an earlier call
            if calls:
                c = rng.choice(calls)
                rows.append(row(ids, "tool", "late", tool_call_id=c.id))
        elif op < 0.5:  # a newer version of an earlier call (same place in the list)
            if calls:
                j = rng.randrange(len(calls))
                calls[j] = dataclasses.replace(calls[j], is_success=rng.random() < 0.5)
        elif op < 0.55:  # a new call of an earlier answer
            asked_rows = [r for r in rows if r.role == "assistant"]
            if asked_rows:
                calls.append(call(ids, rng.choice(asked_rows), position=9))
        elif op < 0.6:  # a result whose call is not (yet) in the list, then the call
            asked = row(ids, "assistant")
            c = call(ids, asked)
            rows += [asked, row(ids, "tool", "early", tool_call_id=c.id)]
            if rng.random() < 0.5:
                calls.append(c)
            else:
                prompt.render(system, summary, rows, calls, memo=memo)
                calls.append(c)
        elif op < 0.65:  # regenerate: the newest rows leave
            del rows[-rng.randint(1, 3) :]
            rows = rows or [row(ids, "user", "again")]
        elif op < 0.68:  # compaction: a summary, the prompt starts after it
            summary = row(ids, "system", f"summary {step}", summary_through=rows[-1].id)
            rows = [row(ids, "user", "after the summary")]
        elif op < 0.7:
            system = rng.choice(["sys", "other"])
        elif op < 0.75:  # a full read: equal rows and calls, other objects
            rows = [dataclasses.replace(r) for r in rows]
            calls = [dataclasses.replace(c) for c in calls]
        elif op < 0.8:
            rows.append(row(ids, rng.choice(["user", "system"]), f"u{step}"))
        elif op < 0.82:
            rows.append(row(ids, "assistant", "hidden", hidden=True))
        want = prompt.render(system, summary, rows, calls)
        got = prompt.render(system, summary, rows, calls, memo=memo)
        assert got == want, step
        assert [m.tool_calls for m in got] == [m.tool_calls for m in want]


def full_entry(rows: list[MessageRow], calls: list[CallRow]) -> Any:
    fresh = HistoryCache()
    fresh.record(LOOP, uuid.uuid4(), rows, calls)
    return fresh.entries[LOOP]


def test_an_entry_extended_by_deltas_is_the_entry_a_full_record_gives() -> None:
    rng = random.Random(7)
    ids = Ids()
    token = uuid.uuid4()
    stored: list[MessageRow] = [row(ids, "user", "go")]  # every row of the loop, in id order
    stored_calls: dict[int, CallRow] = {}
    cache = HistoryCache()
    cache.record(LOOP, token, list(stored), [])
    extended = 0
    for _ in range(300):
        after = cache.after(LOOP, token)
        assert after is not None
        new: list[MessageRow] = []
        op = rng.random()
        if op < 0.7:
            asked = row(ids, "assistant")
            cs = [call(ids, asked, p) for p in range(rng.randint(0, 2))]
            new = [asked, *(row(ids, "tool", "ok", tool_call_id=c.id) for c in cs)]
            stored_calls.update({c.id: c for c in cs})
        elif op < 0.8:
            new = [row(ids, "user", "more")]
        elif op < 0.85:
            new = [row(ids, "system", "summary", summary_through=stored[-1].id)]
        elif op < 0.9:
            new = [row(ids, "assistant", "shell", hidden=True)]
        stored += new
        ids_new = {r.id for r in new}
        delta_calls = [
            c for c in stored_calls.values()
            if c.message_id in ids_new or c.id in {r.tool_call_id for r in new}
        ]  # fmt: skip
        merged = cache.merge(LOOP, after, new, delta_calls)
        assert merged is not None
        rows, calls = merged
        before = cache.entries[LOOP]
        cache.record(LOOP, token, rows, calls)
        e = cache.entries[LOOP]
        extended += e.rendered is before.rendered and not any(r.summary_through for r in new)
        want = full_entry(rows, calls)
        for f in ("last_id", "rows", "calls", "by_id", "summary", "current"):
            assert getattr(e, f) == getattr(want, f), f
        assert e.rendered.split is not None and e.rendered.split[0] is rows
        history = prompt.history("s", rows, calls, memo=e.rendered)
        assert history == prompt.history("s", rows, calls)
    assert extended > 200


def test_a_record_of_other_lists_than_merge_returned_is_a_full_one() -> None:
    ids = Ids()
    token = uuid.uuid4()
    first = [row(ids, "user", "go")]
    cache = HistoryCache()
    cache.record(LOOP, token, first, [])
    more = [row(ids, "user", "x")]
    merged = cache.merge(LOOP, first[0].id, more, [])
    assert merged is not None
    superseded = dataclasses.replace(first[0], superseded_at=NOW)
    cache.record(LOOP, token, [superseded, *more], [])  # not the merged lists: filtered again
    assert cache.entries[LOOP].current == more

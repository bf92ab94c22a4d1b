"""Event rows: wire logs and transitions, append-only; pruned by the janitor.

A new-form `llm.request` stores its body as a reference to its loop's wire parts
(pipeline/wire.py); reading events rebuilds it (`rebuild`): the exact text sent, checked
against the SHA-256 recorded when it was sent, and shown as `request_data.body` as before.
Old-form rows (`request_data.body` stored whole, by older releases) read as they are.

Guarantee: one statement per batch. Never: stores an unredacted secret (callers redact;
`insert_many` scrubs again as a last line of defence — a new-form row's parts were
redacted piece by piece when first stored, and the rebuilt body is scrubbed on the way out).
Called by: engine pipelines, lifecycle, the MCP endpoint, janitor, the API (fleet feed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from agentd import event_names, redact
from agentd.db.pool import Connection
from agentd.store.models import Event, NewEvent
from agentd.store.queries import sql


async def insert_many(conn: Connection, events: Sequence[NewEvent]) -> None:
    if not events:
        return
    await conn.execute(sql("event_insert_many"), *columns(events))


def _request_data(data: Any) -> Any:
    """Scrubbed, except a new-form row's parts: those were redacted piece by piece (and
    scrubbing them would cost O(history) per turn — they are text, not structure)."""
    if isinstance(data, dict) and "parts" in data:
        rest = redact.scrub({k: v for k, v in data.items() if k != "parts"})
        return {**rest, "parts": {k: redact.text(v) for k, v in data["parts"].items()}}
    return redact.scrub(data)


def _values(e: NewEvent) -> dict[str, Any]:
    """One event's column values, redacted, named as `_COLUMNS` names them."""
    return {
        "loop_id": e.loop_id,
        "name": e.name,
        "reason": e.reason,
        "http_method": e.http_method,
        "url": redact.text(e.url) if e.url else None,
        "status": e.status,
        "request_data": _request_data(e.request_data),
        "response_data": redact.scrub(e.response_data),
        "duration": e.duration,
        "log": redact.text(e.log) if e.log else None,
        "tool_call_id": e.tool_call_id,
        "message_id": e.message_id,
        "inbound_session_id": e.inbound_session_id,
    }


def columns(events: Sequence[NewEvent]) -> list[list[object]]:
    """The 13 parallel arrays `event_insert_many` unnests (redacted), for any statement
    that inserts events the same way."""
    # A misspelt name would be an event no reader, filter or webhook ever finds: refuse it.
    unknown = sorted({e.name for e in events if not event_names.is_known(e.name)})
    if unknown:
        raise ValueError(f"unknown event name(s) {unknown}: add them to agentd.event_names")
    rows = [_values(e) for e in events]
    return [[row[c] for row in rows] for c in _COLUMNS]


_COLUMNS = (
    "loop_id",
    "name",
    "reason",
    "http_method",
    "url",
    "status",
    "request_data",
    "response_data",
    "duration",
    "log",
    "tool_call_id",
    "message_id",
    "inbound_session_id",
)


def documents(events: Sequence[NewEvent], attach: Sequence[bool]) -> list[dict[str, Any]]:
    """The events as JSON objects named by column (redacted, as `columns`), each with its
    `attach` flag, for a statement that reads them from a jsonb document
    (`jsonb_to_recordset`). A uuid stays a UUID (the json codec writes its string); json
    values stay json."""
    out: list[dict[str, Any]] = []
    n = len(attach)
    for i, e in enumerate(events):
        doc = _values(e)
        doc["attach"] = attach[i] if i < n else None
        out.append(doc)
    return out


async def list_(
    conn: Connection,
    *,
    loop_id: UUID,
    after_id: int = 0,
    limit: int = 100,
    rebuild: bool = True,
) -> list[Event]:
    """A page of the loop's events; with `rebuild`, new-form wire logs carry their body."""
    rows = [
        Event.from_record(r) for r in await conn.fetch(sql("event_list"), loop_id, after_id, limit)
    ]
    if rebuild and any(_ref(e) is not None for e in rows):
        parts = await wire_parts(conn, loop_id=loop_id)
        memo: dict[str, list[str]] = {}
        rows = [_rebuilt(e, parts, memo) for e in rows]
    return rows


async def wire_parts(conn: Connection, *, loop_id: UUID) -> dict[str, str]:
    """Every stored wire part of a loop: hex key -> text."""
    return {r["key"]: r["body"] for r in await conn.fetch(sql("event_wire_parts"), loop_id)}


def _ref(e: Event) -> dict[str, Any] | None:
    d = e.request_data
    ref = d.get("body_ref") if isinstance(d, dict) else None
    return ref if isinstance(ref, dict) else None


@dataclasses.dataclass(frozen=True)
class Rebuilt:
    text: str | None  # None: a part is missing (pruned, or never committed)
    sha256: str | None
    verified: bool  # the text's SHA-256 is the one recorded when it was sent


def pieces(manifest: str, parts: dict[str, str], memo: dict[str, list[str]]) -> list[str]:
    """The piece keys a manifest lists, following its bases (iteratively: a chain is as
    long as the loop). KeyError: a part is missing."""
    chain: list[tuple[str, dict[str, Any]]] = []
    key: str | None = manifest
    while key is not None and key not in memo:
        m = json.loads(parts[key])
        chain.append((key, m))
        key = m["b"]
    cur = memo[key] if key is not None else []
    for mkey, m in reversed(chain):
        out: list[str] = []
        for op in m["o"]:
            if isinstance(op, list):
                out.extend(cur[op[0] : op[1]])
            else:
                out.append(op)
        memo[mkey] = cur = out
    return memo[manifest]


def rebuild(ref: dict[str, Any], parts: dict[str, str], memo: dict[str, list[str]]) -> Rebuilt:
    """The body a `body_ref` names, exactly as it was stored, and whether it verifies."""
    try:
        text = "".join(parts[k] for k in pieces(ref["manifest"], parts, memo))
    except (KeyError, ValueError, TypeError):
        return Rebuilt(text=None, sha256=ref.get("sha256"), verified=False)
    got = hashlib.sha256(text.encode()).hexdigest()
    return Rebuilt(text=text, sha256=ref.get("sha256"), verified=got == ref.get("sha256"))


def _rebuilt(e: Event, parts: dict[str, str], memo: dict[str, list[str]]) -> Event:
    ref = _ref(e)
    if ref is None:
        return e
    r = rebuild(ref, parts, memo)
    data = dict(e.request_data)
    body: Any = None
    if r.text is not None:
        try:
            body = json.loads(r.text)
        except ValueError:
            body = r.text
    data["body"] = redact.scrub(body)  # stored redacted; scrubbed again on the way out
    data["body_ref"] = {**ref, "verified": r.verified, "available": r.text is not None}
    return dataclasses.replace(e, request_data=data)


async def list_named(
    conn: Connection, *, loop_id: UUID, names: Sequence[str], limit: int = 200
) -> list[Event]:
    rows = await conn.fetch(sql("event_list_named"), loop_id, list(names), limit)
    return [Event.from_record(r) for r in rows]


@dataclass(frozen=True)
class FeedPage:
    events: list[Event]
    position: int  # every id up to here was considered: resume after it
    more: bool  # False: caught up with what may be served now


#: Ids one feed query scans, and windows one read may scan before it answers: a filter
#: that matches rarely costs bounded work per request, and the position still advances.
FEED_WINDOW = 10_000
FEED_MAX_WINDOWS = 20


async def read_feed(
    conn: Connection,
    *,
    after_id: int = 0,
    loop_id: UUID | None = None,
    agent: str | None = None,
    names: Sequence[str] | None = None,
    limit: int = 100,
    settle: float = 1.0,
) -> FeedPage:
    """Events of every loop after `after_id`, oldest first, each filter optional; events
    younger than `settle` seconds are held back (see `event_feed_horizon`). New-form wire
    logs carry their rebuilt body, as on a loop's own event list."""
    horizon = int(await conn.fetchval(sql("event_feed_horizon"), settle))
    found: list[Event] = []
    pos = after_id
    names_arg = list(names) if names is not None else None
    for _ in range(FEED_MAX_WINDOWS):
        if pos >= horizon:
            break
        upto = min(horizon, pos + FEED_WINDOW)
        rows = await conn.fetch(
            sql("event_list_feed"), pos, upto, loop_id, agent, names_arg, limit - len(found)
        )
        found.extend(Event.from_record(r) for r in rows)
        if len(found) >= limit:
            pos = found[-1].id
            break
        pos = upto
    more = len(found) >= limit or pos < horizon
    return FeedPage(await _rebuilt_all(conn, found), max(pos, after_id), more=more)


async def _rebuilt_all(conn: Connection, rows: list[Event]) -> list[Event]:
    """New-form wire logs of any loops get their body, as `list_` gives a loop's."""
    loops = {e.loop_id for e in rows if e.loop_id is not None and _ref(e) is not None}
    if not loops:
        return rows
    by_loop: dict[UUID, tuple[dict[str, str], dict[str, list[str]]]] = {}
    for loop_id in loops:
        by_loop[loop_id] = (await wire_parts(conn, loop_id=loop_id), {})
    out = []
    for e in rows:
        if e.loop_id in by_loop and _ref(e) is not None:
            parts, memo = by_loop[e.loop_id]
            e = _rebuilt(e, parts, memo)
        out.append(e)
    return out


async def feed_horizon(conn: Connection, *, settle: float = 1.0) -> int:
    """The highest id the fleet feed may serve now (see `event_feed_horizon`)."""
    return int(await conn.fetchval(sql("event_feed_horizon"), settle))


async def max_id(conn: Connection) -> int:
    return int(await conn.fetchval(sql("event_max_id")))


async def prune(conn: Connection, *, cutoff: datetime, batch: int) -> int:
    return int(await conn.fetchval(sql("event_prune"), cutoff, batch))


async def prune_wire(conn: Connection, *, cutoff: datetime, batch: int) -> int:
    """One batch of wire-log events (llm.request, mcp.*) older than the cutoff."""
    return int(await conn.fetchval(sql("event_prune_wire"), cutoff, batch))


async def prune_wire_parts(conn: Connection, *, cutoff: datetime, batch: int) -> int:
    """One batch of the wire parts of loops whose newest part is older than the cutoff
    (every request that referenced them is older too, so already pruned)."""
    return int(await conn.fetchval(sql("event_prune_wire_parts"), cutoff, batch))


async def publish(conn: Connection, payload: dict[str, object]) -> None:
    """Notify live observers at commit (payload trimmed to fit NOTIFY's 8000 bytes)."""
    import json

    # A status's reason or error text reaches live streams as it is published.
    text = json.dumps(redact.transcript(payload), default=str)
    if len(text.encode()) > 7900:
        slim = dict(payload)
        for key in ("content", "reasoning", "delta"):
            if isinstance(slim.get(key), str):
                slim[key] = str(slim[key])[:2000]
                slim["truncated"] = True
        text = json.dumps(slim, default=str)[:7900]
    await conn.execute(sql("event_publish"), text)


async def control(conn: Connection, payload: dict[str, object]) -> None:
    import json

    await conn.execute(sql("event_control"), json.dumps(payload, default=str))


async def activity_per_minute(conn: Connection, *, window: float) -> list[dict[str, object]]:
    """{minute, turns, tool_calls, failures} per minute with any, over the last `window` s."""
    return [dict(r) for r in await conn.fetch(sql("event_activity_per_minute"), window)]


async def failure_reasons(
    conn: Connection, *, window: float, limit: int = 20
) -> list[dict[str, object]]:
    """{reason, n, last_at, last_log, last_loop_id} of loop failures in the last `window` s."""
    return [dict(r) for r in await conn.fetch(sql("event_failure_reasons"), window, limit)]


async def list_for_inbound(
    conn: Connection, *, inbound_session_id: int, after_id: int = 0, limit: int = 100
) -> list[Event]:
    rows = await conn.fetch(sql("event_list_for_inbound"), inbound_session_id, after_id, limit)
    return [Event.from_record(r) for r in rows]


#: NOTIFY payloads stop at 8000 bytes; a delta's JSON stays under this.
DELTA_PAYLOAD_BYTES = 7000


def delta_payloads(*, loop_id: UUID, message_id: int, offset: int, text: str) -> list[str]:
    """`text` as `delta` notifications, each small enough for NOTIFY, in order: one in the
    common case; a long text (a fast model, or the text so far for a new observer) is cut
    into consecutive pieces, so no delta is ever truncated. Published in one statement (one
    transaction), they arrive in this order.

    Each delta starts exactly where the partial saved with the previous one ends, so a
    subscriber holding any saved partial (or any earlier delta) can drop the overlap and
    never shows a character twice or skips one (api/stream_hub.DeltaCursor).
    """
    base = {"type": "delta", "loop_id": str(loop_id), "message_id": message_id}
    out: list[str] = []
    while True:
        n = len(text)
        piece = json.dumps({**base, "offset": offset, "delta": text})  # ASCII: chars = bytes
        while len(piece) > DELTA_PAYLOAD_BYTES and n > 1:
            n = max(1, min(n - 1, n * DELTA_PAYLOAD_BYTES // len(piece) - 16))
            piece = json.dumps({**base, "offset": offset, "delta": text[:n]})
        out.append(piece)
        if n >= len(text):
            return out
        offset += n
        text = text[n:]


async def publish_many(conn: Connection, payloads: list[str]) -> None:
    if payloads:
        await conn.execute(sql("event_publish_many"), payloads)

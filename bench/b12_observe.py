"""B12's observer: one `GET /v1/loops/{id}/stream` read to its end, every frame timed, and
what it saw scored against the fake model's record of when each token was written.

Token k of every answer is " w<k>" (bench.b12_fake), so a delta's characters name the
tokens it completes: a token arrives with the delta holding its last character.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from bench.b12_fake import token

DONE = ("completed", "failed", "stopped")


@dataclass
class Seen:
    tag: str
    #: (arrival, message_id, offset, text, truncated) per delta frame
    deltas: list[tuple[float, int, int, str, bool]] = field(default_factory=list)
    #: the assistant messages' committed text, by message id
    messages: dict[int, str] = field(default_factory=dict)
    error: str | None = None
    empty: list[str] = field(default_factory=list)  # names of events with no data


async def observe(client: httpx.AsyncClient, loop_id: str, tag: str) -> Seen:
    seen = Seen(tag)
    try:
        async with aconnect_sse(client, "GET", f"/v1/loops/{loop_id}/stream") as source:
            source.response.raise_for_status()
            async for sse in source.aiter_sse():
                now = time.monotonic()
                if not sse.data:
                    seen.empty.append(sse.event)
                    continue
                if sse.event == "delta":
                    d = json.loads(sse.data)
                    seen.deltas.append(
                        (now, d["message_id"], d["offset"], d["delta"], bool(d.get("truncated")))
                    )
                elif sse.event == "message":
                    m = json.loads(sse.data)
                    if m.get("role") == "assistant":
                        seen.messages[int(m["id"])] = m.get("content") or ""
                elif sse.event == "status" and json.loads(sse.data).get("status") in DONE:
                    break
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        seen.error = f"{type(exc).__name__}: {exc}"
    return seen


def ends(n: int) -> list[int]:
    """The character offset where each token of an n-token answer ends."""
    out, at = [], 0
    for k in range(n):
        at += len(token(k))
        out.append(at)
    return out


def score(seen: Seen, emits: list[float]) -> dict[str, Any]:
    """Lags (s) of the tokens this observer got as deltas; tokens it got only in the final
    message (missed); deltas flagged truncated; characters shown twice or out of order."""
    n = len(emits)
    stops = ends(n)
    arrived: dict[int, float] = {}  # token -> arrival of the delta completing it
    covered = 0  # characters received contiguously from 0
    overlap = disorder = 0
    truncated = sum(1 for d in seen.deltas if d[4])
    mids = {d[1] for d in seen.deltas}
    answer = next(iter(seen.messages.values()), "")
    for at, _mid, offset, text, _trunc in seen.deltas:
        if offset > covered:
            disorder += 1
        elif offset < covered:
            overlap += 1
        end = offset + len(text)
        if offset <= covered < end:
            for k, stop in enumerate(stops):
                if covered < stop <= end:
                    arrived[k] = at
            covered = end
    missed = sum(1 for k, stop in enumerate(stops) if k not in arrived and stop <= len(answer))
    return {
        "lags": [arrived[k] - emits[k] for k in sorted(arrived)],
        "emitted": [emits[k] for k in sorted(arrived)],
        "tokens_seen": len(arrived),
        "missed": missed,
        "truncated": truncated,
        "overlap": overlap,
        "gaps": disorder,
        "messages": len(mids),
        "complete": answer == "".join(token(k) for k in range(n)),
        "error": seen.error,
        "empty_events": seen.empty,
    }

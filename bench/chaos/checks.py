"""Read the rows after the soak quiesces and list every broken invariant.

Allowed: a loop failed or paused WITH a reason; the same idempotency key executed twice
(at-least-once delivery). Never: a loop left in init/queued/running/waiting, two visible
assistant messages for one (loop, step), two results for one tool call, an effect carrying
another call's key, a live lease held by a dead worker, a job row nothing will run.
"""

from __future__ import annotations

import collections
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from bench.chaos.fakes import Effect

KEY_PREFIX = "agentd:tool_call:"
STUCK = ("init", "queued", "running", "waiting")


@dataclass
class Findings:
    loops: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)  # why loops failed or paused
    turns: int = 0
    tool_calls: int = 0
    effects: int = 0
    duplicate_effects: int = 0  # same key executed again: allowed (at-least-once)
    duplicate_messages: int = 0  # a second visible answer for one (loop, step)
    duplicate_results: int = 0  # a second result message for one tool call
    lost: list[str] = field(default_factory=list)  # stuck, or failed/paused without a reason
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.lost and not self.violations


async def inspect(
    conn: asyncpg.Connection,
    loop_ids: list[uuid.UUID],
    effects: list[Effect],
    dead_pids: set[int],
) -> Findings:
    f = Findings(loops=len(loop_ids))
    loops = await conn.fetch(
        "SELECT id, status, status_reason, error_message, step_count, worker_id, "
        "lease_expires_at, execution_token FROM loops WHERE id = ANY($1::uuid[])",
        loop_ids,
    )
    if len(loops) != len(loop_ids):
        f.lost.append(f"{len(loop_ids) - len(loops)} loop rows missing")
    f.statuses = dict(collections.Counter(r["status"] for r in loops))
    f.reasons = dict(
        collections.Counter(
            f"{r['status']}: {(r['error_message'] or r['status_reason'] or '')[:90]}"
            for r in loops
            if r["status"] in ("failed", "paused", "stopped")
        )
    )
    for r in loops:
        if r["status"] in STUCK:
            f.lost.append(f"{r['id']} stuck in {r['status']}")
        elif r["status"] in ("failed", "paused", "stopped") and not (
            r["error_message"] or r["status_reason"]
        ):
            f.lost.append(f"{r['id']} {r['status']} without a reason")
        if r["status"] not in STUCK and (r["lease_expires_at"] or r["worker_id"]):
            f.violations.append(f"{r['id']} {r['status']} still leased by {r['worker_id']}")

    steps = await conn.fetch(
        "SELECT loop_id, step, count(*) AS n FROM messages WHERE role = 'assistant' "
        "AND NOT hidden AND loop_id = ANY($1::uuid[]) GROUP BY loop_id, step",
        loop_ids,
    )
    f.turns = len(steps)
    by_loop: dict[uuid.UUID, list[int]] = collections.defaultdict(list)
    for s in steps:
        by_loop[s["loop_id"]].append(s["step"])
        if s["n"] > 1:
            f.duplicate_messages += s["n"] - 1
            f.violations.append(f"{s['loop_id']} step {s['step']}: {s['n']} visible answers")
    for r in loops:
        if r["status"] == "completed":
            want = list(range(1, r["step_count"] + 1))
            if sorted(by_loop.get(r["id"], [])) != want:
                got = sorted(by_loop.get(r["id"], []))
                f.violations.append(f"{r['id']} completed with steps {got}, want {want}")

    calls = await conn.fetch(
        "SELECT tc.id, tc.loop_id, tc.name, tc.arguments, tc.status, l.status AS loop_status, "
        "tc.lease_worker_id, tc.leased_until, "
        "(SELECT count(*) FROM messages m WHERE m.role = 'tool' AND m.tool_call_id = tc.id) "
        "AS results FROM tool_calls tc JOIN loops l ON l.id = tc.loop_id "
        "WHERE tc.loop_id = ANY($1::uuid[])",
        loop_ids,
    )
    f.tool_calls = len(calls)
    by_id = {c["id"]: c for c in calls}
    for c in calls:
        if c["results"] > 1:
            f.duplicate_results += c["results"] - 1
            f.violations.append(f"tool call {c['id']}: {c['results']} results")
        if c["loop_status"] == "completed" and c["results"] != 1:
            f.violations.append(f"tool call {c['id']} of a completed loop: no result")
    orphans = await conn.fetchval(
        "SELECT count(*) FROM messages m WHERE m.role = 'tool' AND m.loop_id = ANY($1::uuid[]) "
        "AND NOT EXISTS (SELECT 1 FROM tool_calls tc WHERE tc.id = m.tool_call_id)",
        loop_ids,
    )
    if orphans:
        f.violations.append(f"{orphans} tool messages without a tool call")
    shells = await conn.fetchval(
        "SELECT count(*) FROM messages m JOIN loops l ON l.id = m.loop_id "
        "WHERE m.status = 'processing' AND l.status <> ALL($2::text[]) "
        "AND m.loop_id = ANY($1::uuid[])",
        loop_ids,
        list(STUCK),
    )
    if shells:
        f.violations.append(f"{shells} 'processing' messages left on settled loops")

    # Effects: each must carry the key of the call whose arguments it executed.
    f.effects = len(effects)
    seen = collections.Counter(e.key for e in effects)
    f.duplicate_effects = sum(n - 1 for n in seen.values() if n > 1)
    for e in effects:
        if not e.key or not e.key.startswith(KEY_PREFIX):
            f.violations.append(f"effect without an idempotency key: {e}")
            continue
        call = by_id.get(int(e.key.removeprefix(KEY_PREFIX)))
        if call is None:
            f.violations.append(f"effect with an unknown key: {e}")
        elif call["name"] != e.tool or _args(call["arguments"]) != e.arguments:
            f.violations.append(f"effect {e} executed under another call's key {dict(call)}")

    # Leases: nothing live may be held by a worker we killed.
    dead = await conn.fetch("SELECT id FROM workers WHERE pid = ANY($1::int[])", list(dead_pids))
    dead_ids = [r["id"] for r in dead]
    held = await conn.fetchval(
        "SELECT count(*) FROM loops WHERE worker_id = ANY($1::uuid[]) AND lease_expires_at > now()",
        dead_ids,
    )
    held += await conn.fetchval(
        "SELECT count(*) FROM tool_calls WHERE lease_worker_id = ANY($1::uuid[]) "
        "AND leased_until > now()",
        dead_ids,
    )
    if held:
        f.violations.append(f"{held} live leases held by dead workers")

    jobs = await conn.fetch(
        "SELECT j.id, j.queue, j.kind, l.status FROM jobs j LEFT JOIN loops l ON l.id = j.loop_id "
        "WHERE j.queue <> 'maintenance' AND (l.id IS NULL OR l.status <> ALL($1::text[]))",
        list(STUCK),
    )
    for j in jobs:
        f.violations.append(f"orphaned job {dict(j)}")
    return f


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        import json

        return json.loads(raw)
    return raw

"""Idempotency keys of loop starts: which loop a client's Idempotency-Key started.

Guarantee: one loop per live key; a key is claimed in the transaction that starts its loop,
so a rolled-back start leaves no key behind.
Tolerates: two requests with one key at once (the primary key serializes them; the loser's
claim returns None and its caller rolls back).
Never: lets a key past its window block a new start.
Called by: api.idempotency (POST /v1/loops), api.routes_batch (POST /v1/loops:batch), the
janitor (prune).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from agentd.db.pool import Connection
from agentd.store.queries import sql


@dataclass(frozen=True)
class IdempotencyKey:
    key: str
    request_hash: bytes
    loop_id: UUID
    created_at: datetime


async def get(conn: Connection, *, key: str, window: timedelta) -> IdempotencyKey | None:
    row = await conn.fetchrow(sql("idempotency_key_get"), key, window.total_seconds())
    return IdempotencyKey(**dict(row)) if row is not None else None


async def claim(
    conn: Connection, *, key: str, request_hash: bytes, loop_id: UUID, window: timedelta
) -> bool:
    """Record `key` for `loop_id`; False when another live request holds it."""
    row = await conn.fetchrow(
        sql("idempotency_key_claim"), key, request_hash, loop_id, window.total_seconds()
    )
    return row is not None


async def get_many(
    conn: Connection, *, keys: list[str], window: timedelta
) -> dict[str, IdempotencyKey]:
    """The live ones of `keys`, by key."""
    rows = await conn.fetch(sql("idempotency_key_get_many"), keys, window.total_seconds())
    return {r["key"]: IdempotencyKey(**dict(r)) for r in rows}


async def claim_many(
    conn: Connection,
    *,
    keys: list[str],
    request_hashes: list[bytes],
    loop_ids: list[UUID],
    window: timedelta,
) -> set[str]:
    """Record each key for its loop (parallel lists, keys distinct); the keys recorded (one
    missing: another live request holds it)."""
    rows = await conn.fetch(
        sql("idempotency_key_claim_many"), keys, request_hashes, loop_ids, window.total_seconds()
    )
    return {r["key"] for r in rows}


async def prune(conn: Connection, *, cutoff: datetime, batch: int) -> int:
    return int(await conn.fetchval(sql("idempotency_key_prune"), cutoff, batch))

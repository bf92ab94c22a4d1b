"""Webhook endpoints (the config's `[[webhooks]]`) and their delivery queue.

Guarantee: a delivery row is written by the 0013/0014 triggers in the transaction that made
its event happen; a claim leases it to one worker at a time (SKIP LOCKED, lease, the
worker's liveness); `finish` writes only under the lease it was claimed with.
Tolerates: any number of deliverers; a deliverer killed mid-attempt (its lease is free as
soon as its heartbeat backend is gone, or when the lease expires).
Never: stores a secret (only the name of its environment variable).
Called by: engine.webhooks (sync, claim, finish), the admin UI and the API (list, resend),
engine.janitor (prune).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from agentd.db.pool import Connection, Record
from agentd.store.models import _Row
from agentd.store.queries import sql


@dataclass(frozen=True)
class Endpoint(_Row):
    id: int
    url: str
    events: list[str]
    secret_env: str
    enabled: bool
    created_at: datetime
    updated_at: datetime
    pending: int = 0
    failed: int = 0
    disabled_reason: str | None = None  # 0030: 'gone' after a 410 Gone


@dataclass(frozen=True)
class Delivery(_Row):
    id: int
    endpoint_id: int
    message_id: str  # the `webhook-id` header, the same on every attempt
    event_type: str
    loop_id: UUID | None
    payload: dict[str, Any]
    status: str  # pending, delivered, failed
    attempts: int
    next_attempt_at: datetime
    lease_token: UUID | None
    leased_until: datetime | None
    lease_worker_id: UUID | None
    last_status: int | None
    last_error: str | None
    last_attempt_at: datetime | None
    delivered_at: datetime | None
    created_at: datetime
    updated_at: datetime
    url: str | None = None  # the endpoint's, on list and get


def _delivery(rec: Record | None) -> Delivery | None:
    return Delivery.from_record(rec) if rec is not None else None


async def upsert_endpoint(
    conn: Connection, *, url: str, events: Sequence[str], secret_env: str
) -> Endpoint:
    rec = await conn.fetchrow(sql("webhook_endpoint_upsert"), url, list(events), secret_env)
    return Endpoint.from_record(rec)


async def disable_other_endpoints(conn: Connection, *, keep_ids: Sequence[int]) -> None:
    await conn.execute(sql("webhook_endpoint_disable_others"), list(keep_ids))


async def disable_gone(conn: Connection, *, endpoint_id: int, last_error: str) -> Endpoint | None:
    """After a 410 Gone: disable the endpoint and fail its idle pending deliveries (`failed`
    counts them); None when it was already disabled."""
    rec = await conn.fetchrow(sql("webhook_endpoint_gone"), endpoint_id, last_error)
    return Endpoint.from_record(rec) if rec is not None else None


async def list_endpoints(conn: Connection) -> list[Endpoint]:
    return [Endpoint.from_record(r) for r in await conn.fetch(sql("webhook_endpoint_list"))]


async def claim(
    conn: Connection,
    *,
    endpoint_ids: Sequence[int],
    lease_token: UUID,
    worker_id: UUID,
    lease_seconds: float,
    limit: int,
) -> list[Delivery]:
    rows = await conn.fetch(
        sql("webhook_delivery_claim"),
        list(endpoint_ids),
        lease_token,
        worker_id,
        lease_seconds,
        limit,
    )
    return [Delivery.from_record(r) for r in rows]


async def finish(
    conn: Connection,
    *,
    delivery_id: int,
    lease_token: UUID,
    delivered: bool,
    last_status: int | None,
    last_error: str | None,
    retry_delay: float | None,
) -> Delivery | None:
    """Record an attempt's outcome; None when the lease was lost (nothing written)."""
    return _delivery(
        await conn.fetchrow(
            sql("webhook_delivery_finish"),
            delivery_id,
            lease_token,
            delivered,
            last_status,
            last_error,
            retry_delay,
        )
    )


async def resend(conn: Connection, *, delivery_id: int) -> Delivery | None:
    """Make a delivery due now (same message id); None when absent or in flight."""
    row = _delivery(await conn.fetchrow(sql("webhook_delivery_resend"), delivery_id))
    if row is not None:
        await conn.execute(sql("webhook_delivery_notify"))
    return row


async def get(conn: Connection, *, delivery_id: int) -> Delivery | None:
    return _delivery(await conn.fetchrow(sql("webhook_delivery_get"), delivery_id))


async def list_(
    conn: Connection, *, status: str | None = None, before_id: int | None = None, limit: int = 50
) -> list[Delivery]:
    """Newest first; pass the last id back as `before_id` for the next page."""
    rows = await conn.fetch(
        sql("webhook_delivery_list"), status, before_id if before_id else 2**63 - 1, limit
    )
    return [Delivery.from_record(r) for r in rows]


async def prune(conn: Connection, *, cutoff: datetime, batch: int) -> int:
    """Delete one batch of finished deliveries last touched before `cutoff`."""
    return int(await conn.fetchval(sql("webhook_delivery_prune"), cutoff, batch))

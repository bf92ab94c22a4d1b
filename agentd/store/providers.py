"""Provider rows: the fleet-wide back-off deadline and the rpm/tpm/concurrency ledger.

Guarantee: an admission runs under the provider row's lock with a snapshot taken after
it, so racing admissions on one provider key (any worker, any process) see each other.
Tolerates: workers dying mid-call (an unsettled request only counts while its turn still
holds its lease on the same generation), any number of concurrent admitters and blockers.
Never: stores an api token (rows are keyed by a fingerprint); holds the lock past the
admission's transaction.
Called by: pipeline.llm.limits (NetworkCalling), api (GET /v1/providers, metrics, dashboard).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from agentd.db.pool import Connection
from agentd.store.queries import sql


@dataclass(frozen=True)
class Admission:
    reason: str | None  # None: admitted; else provider_backoff|_concurrency|_rpm|_tpm
    request_id: int | None
    retry_at: datetime | None

    @property
    def admitted(self) -> bool:
        return self.reason is None


async def blocked_until(conn: Connection, *, provider_id: str) -> datetime | None:
    value: datetime | None = await conn.fetchval(sql("provider_blocked_until"), provider_id)
    return value


async def lock(
    conn: Connection,
    *,
    provider_id: str,
    base_url: str,
    model: str,
    key_fingerprint: str,
    max_concurrency: int | None,
    rpm: int | None,
    tpm: int | None,
) -> datetime | None:
    """Create-or-lock the provider row (call inside a transaction); its back-off deadline."""
    value: datetime | None = await conn.fetchval(
        sql("provider_lock"), provider_id, base_url, model, key_fingerprint, max_concurrency,
        rpm, tpm,
    )  # fmt: skip
    return value


async def admit(
    conn: Connection,
    *,
    provider_id: str,
    loop_id: UUID,
    execution_token: UUID,
    max_concurrency: int | None,
    rpm: int | None,
    tpm: int | None,
    estimate: int,
    retry_seconds: float,
    window_seconds: float,
) -> Admission:
    rec = await conn.fetchrow(
        sql("provider_admit"), provider_id, loop_id, execution_token, max_concurrency, rpm, tpm,
        estimate, retry_seconds, window_seconds,
    )  # fmt: skip
    assert rec is not None  # provider_lock created the row
    return Admission(reason=rec["reason"], request_id=rec["request_id"], retry_at=rec["retry_at"])


async def settle(conn: Connection, *, request_id: int, tokens: int | None) -> None:
    await conn.execute(sql("provider_request_settle"), request_id, tokens)


async def block(
    conn: Connection,
    *,
    provider_id: str,
    base_url: str,
    model: str,
    key_fingerprint: str,
    seconds: float,
    status: int,
) -> datetime:
    value: datetime = await conn.fetchval(
        sql("provider_block"), provider_id, base_url, model, key_fingerprint, seconds, status
    )
    return value


async def list_(conn: Connection, *, window_seconds: float) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(sql("provider_list"), window_seconds)]

"""/v1/webhooks and /v1/webhook-deliveries: configured endpoints, deliveries, re-send."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field

from agentd import redact
from agentd.api import problems
from agentd.api.problems import ApiProblem
from agentd.api.routes_loops import BIGINT, app_state
from agentd.api.schemas import Page
from agentd.db.pool import connection, transaction
from agentd.store import webhooks
from agentd.store.webhooks import Delivery, Endpoint

router = APIRouter(tags=["webhooks"])


class EndpointOut(BaseModel):
    id: int
    url: str
    events: list[str]
    secret_env: str = Field(description="The env var holding the secret (never the secret).")
    enabled: bool = Field(description="False once removed from the config file.")
    pending: int
    failed: int

    @classmethod
    def of(cls, e: Endpoint) -> EndpointOut:
        return cls(
            id=e.id,
            url=redact.text(e.url),  # a token in its query string is masked
            events=e.events,
            secret_env=e.secret_env,
            enabled=e.enabled,
            pending=e.pending,
            failed=e.failed,
        )


class DeliveryOut(BaseModel):
    id: int
    endpoint_id: int
    url: str | None
    message_id: str = Field(description="The `webhook-id` header: the same on every attempt.")
    event_type: str
    loop_id: UUID | None
    payload: dict[str, Any] = Field(description="The JSON body sent.")
    status: str = Field(description="pending, delivered or failed (out of attempts).")
    attempts: int
    next_attempt_at: datetime
    last_status: int | None
    last_error: str | None
    last_attempt_at: datetime | None
    delivered_at: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, d: Delivery) -> DeliveryOut:
        return cls(
            id=d.id,
            endpoint_id=d.endpoint_id,
            url=redact.text(d.url) if d.url else None,
            message_id=d.message_id,
            event_type=d.event_type,
            loop_id=d.loop_id,
            payload=redact.scrub(d.payload),  # stored as built; masked like any face
            status=d.status,
            attempts=d.attempts,
            next_attempt_at=d.next_attempt_at,
            last_status=d.last_status,
            last_error=d.last_error,
            last_attempt_at=d.last_attempt_at,
            delivered_at=d.delivered_at,
            created_at=d.created_at,
        )


DeliveryId = Annotated[int, Path(ge=1, le=BIGINT, description="The delivery's id.")]


@router.get("/webhooks", summary="Webhook endpoints", responses=problems.responses(401))
async def list_endpoints(request: Request) -> Page[EndpointOut]:
    async with connection(app_state(request).pool) as conn:
        rows = await webhooks.list_endpoints(conn)
    return Page[EndpointOut](items=[EndpointOut.of(e) for e in rows], next_cursor=None)


@router.get(
    "/webhook-deliveries",
    summary="Webhook deliveries, newest first",
    responses=problems.responses(401, 422),
)
async def list_deliveries(
    request: Request,
    status: Annotated[Literal["pending", "delivered", "failed"] | None, Query()] = None,
    cursor: Annotated[
        int | None, Query(ge=1, le=BIGINT, description="`next_cursor` of the previous page.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Page[DeliveryOut]:
    async with connection(app_state(request).pool) as conn:
        rows = await webhooks.list_(conn, status=status, before_id=cursor, limit=limit + 1)
    page = rows[:limit]
    nxt = str(page[-1].id) if len(rows) > limit else None
    return Page[DeliveryOut](items=[DeliveryOut.of(d) for d in page], next_cursor=nxt)


@router.post(
    "/webhook-deliveries/{delivery_id}/resend",
    summary="Send a delivery again (same webhook-id)",
    responses=problems.responses(401, 403, 404, 409, 422),
)
async def resend(delivery_id: DeliveryId, request: Request) -> DeliveryOut:
    """Due now, whatever its status; a delivered one is sent once more with the same
    `webhook-id` (receivers dedupe on it). 409 while an attempt is in flight."""
    async with transaction(app_state(request).pool) as conn:
        row = await webhooks.resend(conn, delivery_id=delivery_id)
        if row is None:
            existing = await webhooks.get(conn, delivery_id=delivery_id)
            if existing is None:
                raise ApiProblem(404, f"no webhook delivery {delivery_id}")
            raise ApiProblem(409, f"delivery {delivery_id} is being sent right now")
        full = await webhooks.get(conn, delivery_id=delivery_id)
    assert full is not None
    return DeliveryOut.of(full)

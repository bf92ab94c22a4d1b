"""Webhooks: the configured endpoints and every delivery (status, attempts, last error),
newest first, with a re-send button (same webhook-id; CSRF like every admin form)."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from agentd import redact
from agentd.admin import render
from agentd.api.state import AppState
from agentd.db.pool import connection, transaction
from agentd.states import WebhookDeliveryStatus
from agentd.store import webhooks

router = APIRouter(prefix="/admin")

PAGE_SIZE = 50
STATUSES = tuple(s.value for s in WebhookDeliveryStatus)


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.agentd
    return state


@router.get("/webhooks", include_in_schema=False)
async def deliveries_page(request: Request) -> Response:
    status = request.query_params.get("status") or None
    if status not in (None, *STATUSES):
        status = None
    before = request.query_params.get("before", "")
    before_id = int(before) if before.isdigit() and len(before) <= 18 else None
    async with connection(_state(request).pool) as conn:
        endpoints = await webhooks.list_endpoints(conn)
        rows = await webhooks.list_(conn, status=status, before_id=before_id, limit=PAGE_SIZE + 1)
    # A url may carry a token in its query: shown masked, like every secret in the UI.
    endpoints = [dataclasses.replace(e, url=redact.text(e.url)) for e in endpoints]
    page = [dataclasses.replace(d, url=redact.text(d.url or "")) for d in rows[:PAGE_SIZE]]
    next_url = None
    if len(rows) > PAGE_SIZE:
        query = {"before": str(page[-1].id), **({"status": status} if status else {})}
        next_url = "/admin/webhooks?" + urlencode(query)
    return render.render(
        request,
        "webhooks.html",
        {
            "nav": "webhooks",
            "endpoints": endpoints,
            "deliveries": page,
            "status": status or "",
            "statuses": STATUSES,
            "paged": before_id is not None,
            "next_url": next_url,
        },
    )


@router.post("/webhooks/deliveries/{delivery_id}/resend", include_in_schema=False)
async def resend(request: Request, delivery_id: str) -> Response:
    back = "/admin/webhooks"
    if not delivery_id.isdigit() or len(delivery_id) > 18:
        return render.redirect(request, back, flash=("error", f"No delivery {delivery_id!r}."))
    async with transaction(_state(request).pool) as conn:
        row = await webhooks.resend(conn, delivery_id=int(delivery_id))
        exists = row is not None or await webhooks.get(conn, delivery_id=int(delivery_id))
    if row is None:
        why = "is being sent right now" if exists else "does not exist"
        return render.redirect(request, back, flash=("error", f"Delivery {delivery_id} {why}."))
    return render.redirect(
        request,
        back,
        flash=("ok", f"Delivery {delivery_id} queued again (webhook-id {row.message_id})."),
    )

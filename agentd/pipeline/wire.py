"""Turns LLM and MCP wire exchanges into event rows."""

from __future__ import annotations

import uuid
from typing import Any

from agentd.llm.types import WireExchange
from agentd.store.models import NewEvent


def llm_events(exchanges: list[WireExchange], *, loop_id: uuid.UUID) -> list[NewEvent]:
    out = []
    for ex in exchanges:
        out.append(
            NewEvent(
                name="llm.request",
                loop_id=loop_id,
                http_method=ex.method,
                url=ex.url,
                status=ex.status,
                request_data={"headers": ex.request_headers, "body": ex.request_body},
                response_data={"headers": ex.response_headers, "body": ex.response_body},
                duration=ex.duration,
                log=(
                    f"attempt {ex.attempt}"
                    + (f": {ex.error}" if ex.error else "")
                    + (f"; retry in {ex.retry_delay:.2f}s" if ex.retry_delay is not None else "")
                ),
            )
        )
    return out


def mcp_events(
    exchanges: list[Any],
    *,
    loop_id: uuid.UUID | None,
    tool_call_id: int | None = None,
    inbound_session_id: int | None = None,
    prefix: str = "mcp",
) -> list[NewEvent]:
    out = []
    for ex in exchanges:
        data = ex.as_event() if hasattr(ex, "as_event") else dict(ex)
        out.append(
            NewEvent(
                name=f"{prefix}.{data.get('method') or 'request'}",
                loop_id=loop_id,
                tool_call_id=tool_call_id,
                inbound_session_id=inbound_session_id,
                http_method="POST",
                url=data.get("server"),
                status=data.get("status"),
                request_data={
                    "raw": data.get("raw_request"),
                    "headers": data.get("request_headers") or {},
                },
                response_data={
                    "raw": data.get("raw_response"),
                    "headers": data.get("response_headers") or {},
                },
                duration=data.get("duration"),
                log="\n".join(x for x in (data.get("error"), data.get("stderr")) if x) or None,
            )
        )
    return out

"""agentd.client: start and steer agentd loops from Python (sync and async, on httpx).

    from agentd.client import AsyncClient

    async with AsyncClient("http://127.0.0.1:8080", token) as agentd:
        loop = await agentd.start("writer", "Draft a haiku.", idempotency_key="req-42")
        async for event in agentd.stream(loop.id):
            print(event.delta, end="")

`Client` has the same methods, blocking. Responses are the API's own models (LoopOut,
MessageOut, ToolCallOut, EventOut, Page); errors are `agentd.client.errors` exceptions
built from the problem+json body.
"""

from __future__ import annotations

from agentd.client import errors
from agentd.client._async import AsyncClient
from agentd.client._sync import Client
from agentd.client.errors import (
    ApiError,
    BadRequest,
    ClientError,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    TransportError,
    Unauthorized,
    Unavailable,
)
from agentd.client.models import EventOut, LoopOut, MessageOut, Page, StreamEvent, ToolCallOut

__all__ = [
    "ApiError",
    "AsyncClient",
    "BadRequest",
    "Client",
    "ClientError",
    "Conflict",
    "EventOut",
    "Forbidden",
    "LoopOut",
    "MessageOut",
    "NotFound",
    "Page",
    "PayloadTooLarge",
    "StreamEvent",
    "ToolCallOut",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "errors",
]

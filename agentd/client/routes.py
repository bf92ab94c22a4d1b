"""Each API call as data (method, path, body, parser), shared by the sync and async clients."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Generic, TypeVar
from uuid import UUID

from agentd.client.models import (
    EventOut,
    LoopOut,
    MessageOut,
    Page,
    SentMessageOut,
    SentOut,
    ToolCallOut,
)
from agentd.json_types import JSONValue

LoopId = UUID | str
R = TypeVar("R")


@dataclass(frozen=True)
class Call(Generic[R]):
    """One request, and how its JSON answer becomes the client method's `R`."""

    method: str
    path: str
    parse: Callable[[JSONValue], R]
    json: JSONValue = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


def _some(**kw: JSONValue) -> dict[str, Any]:
    """Only the members that were given: the API forbids unknown ones, and an absent member
    keeps the server's default."""
    return {k: v for k, v in kw.items() if v is not None}


def _loop(data: JSONValue) -> LoopOut:
    return LoopOut.model_validate(data)


def _call(data: JSONValue) -> ToolCallOut:
    return ToolCallOut.model_validate(data)


def start(
    agent: str,
    message: str,
    *,
    subject: str | None,
    state: dict[str, Any] | None,
    observe: bool | None,
    max_tokens_total: int | None,
    concurrency_key: str | None,
    concurrency_limit: int | None,
    idempotency_key: str | None,
) -> Call[LoopOut]:
    body = _some(
        agent=agent,
        message=message,
        subject=subject,
        state=state,
        observe=observe,
        max_tokens_total=max_tokens_total,
        concurrency_key=concurrency_key,
        concurrency_limit=concurrency_limit,
    )
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    return Call("POST", "/v1/loops", _loop, json=body, headers=headers)


def get(loop_id: LoopId) -> Call[LoopOut]:
    return Call("GET", f"/v1/loops/{loop_id}", _loop)


def list_loops(
    status: str | None, agent: str | None, limit: int, cursor: str | None
) -> Call[Page[LoopOut]]:
    params = _some(status=status, agent=agent, limit=limit, cursor=cursor)
    return Call("GET", "/v1/loops", Page[LoopOut].model_validate, params=params)


def messages(loop_id: LoopId, include_hidden: bool) -> Call[list[MessageOut]]:
    params = {"include_hidden": "true"} if include_hidden else {}
    return Call(
        "GET",
        f"/v1/loops/{loop_id}/messages",
        lambda d: Page[MessageOut].model_validate(d).items,
        params=params,
    )


def events(loop_id: LoopId, after: int, limit: int) -> Call[Page[EventOut]]:
    return Call(
        "GET",
        f"/v1/loops/{loop_id}/events",
        Page[EventOut].model_validate,
        params={"after": after, "limit": limit},
    )


def send(
    loop_id: LoopId, content: str, mode: str | None = None, idempotency_key: str | None = None
) -> Call[SentOut]:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    return Call(
        "POST",
        f"/v1/loops/{loop_id}/messages",
        SentOut.model_validate,
        json=_some(content=content, mode=mode),
        headers=headers,
    )


def sent_messages(loop_id: LoopId, pending: bool) -> Call[list[SentMessageOut]]:
    return Call(
        "GET",
        f"/v1/loops/{loop_id}/sent-messages",
        lambda d: Page[SentMessageOut].model_validate(d).items,
        params={"pending": "true"} if pending else {},
    )


def action(loop_id: LoopId, name: str, body: dict[str, Any] | None = None) -> Call[LoopOut]:
    """pause, resume, stop, freeze, unfreeze, observe: the loop afterwards."""
    return Call("POST", f"/v1/loops/{loop_id}/{name}", _loop, json=body)


def resume(
    loop_id: LoopId,
    from_: list[str] | None,
    max_steps: int | None,
    max_tokens_total: int | None,
    max_cost: Decimal | str | None = None,
) -> Call[LoopOut]:
    body = _some(
        max_steps=max_steps,
        max_tokens_total=max_tokens_total,
        max_cost=str(max_cost) if max_cost is not None else None,  # exact, never a float
    )
    if from_ is not None:
        body["from"] = list(from_)
    return action(loop_id, "resume", body or None)


def approvals(loop_id: LoopId) -> Call[list[ToolCallOut]]:
    return Call(
        "GET",
        f"/v1/loops/{loop_id}/approvals",
        lambda d: Page[ToolCallOut].model_validate(d).items,
    )


def decide(
    tool_call_id: int, approve: bool, reason: str | None, arguments: dict[str, Any] | None
) -> Call[ToolCallOut]:
    body = _some(reason=reason, arguments=arguments) or None
    verb = "approve" if approve else "deny"
    return Call("POST", f"/v1/tool-calls/{tool_call_id}/{verb}", _call, json=body)


def fork(loop_id: LoopId, message_id: int, title: str | None) -> Call[LoopOut]:
    body = _some(message_id=message_id, title=title)
    return Call("POST", f"/v1/loops/{loop_id}/fork", _loop, json=body)


def regenerate(loop_id: LoopId, message_id: int) -> Call[LoopOut]:
    return Call("POST", f"/v1/loops/{loop_id}/regenerate", _loop, json={"message_id": message_id})


def agents() -> Call[list[dict[str, Any]]]:
    return Call("GET", "/v1/agents", lambda d: list(d["items"]))

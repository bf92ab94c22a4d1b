"""Each API call as data (method, path, body, parser), shared by the sync and async clients."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar
from uuid import UUID

import httpx

from agentd.client.models import (
    AgentUpgradeOut,
    CostsOut,
    DeliveryOut,
    EndpointOut,
    EventOut,
    InputRequestOut,
    LoopOut,
    LoopUpgradeOut,
    MessageOut,
    Page,
    ProvidersOut,
    ScheduleOut,
    SentMessageOut,
    SentOut,
    StateOut,
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
    #: Safe to send again after a connection error that may have reached the server: GETs,
    #: requests with an Idempotency-Key, and the actions the API makes idempotent.
    idempotent: bool = False

    def __post_init__(self) -> None:
        if self.method == "GET" or "Idempotency-Key" in self.headers:
            object.__setattr__(self, "idempotent", True)


#: Connection errors after which nothing can have reached the server: any call may retry.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def retryable(call: Call[Any], exc: httpx.TransportError) -> bool:
    """Send `call` again after `exc`? Always when the connection never opened; otherwise
    only an idempotent call (the first may have been served)."""
    return isinstance(exc, _NOT_SENT) or call.idempotent


def retry_delay(attempt: int) -> float:
    """0.1 s, 0.2 s, 0.4 s, ... capped at 2 s (the Nth retry's pause)."""
    return min(2.0, 0.1 * 2 ** (attempt - 1))


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
    max_cost: Decimal | str | None = None,
) -> Call[LoopOut]:
    body = _some(
        agent=agent,
        message=message,
        subject=subject,
        state=state,
        observe=observe,
        max_tokens_total=max_tokens_total,
        max_cost=str(max_cost) if max_cost is not None else None,  # exact, never a float
        concurrency_key=concurrency_key,
        concurrency_limit=concurrency_limit,
    )
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    return Call("POST", "/v1/loops", _loop, json=body, headers=headers)


def get(loop_id: LoopId) -> Call[LoopOut]:
    return Call("GET", f"/v1/loops/{loop_id}", _loop)


def list_loops(
    status: str | None,
    agent: str | None,
    limit: int,
    cursor: str | None,
    include_state: bool = False,
    parent_id: LoopId | None = None,
) -> Call[Page[LoopOut]]:
    params = _some(
        status=status,
        agent=agent,
        limit=limit,
        cursor=cursor,
        include="state" if include_state else None,
        parent_id=str(parent_id) if parent_id is not None else None,
    )
    return Call("GET", "/v1/loops", Page[LoopOut].model_validate, params=params)


def children(loop_id: LoopId) -> Call[list[LoopOut]]:
    return Call(
        "GET", f"/v1/loops/{loop_id}/children", lambda d: Page[LoopOut].model_validate(d).items
    )


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


#: Lifecycle actions whose repetition changes nothing (pausing a paused loop is a no-op).
IDEMPOTENT_ACTIONS = frozenset({"pause", "stop", "freeze", "unfreeze", "observe"})


def action(loop_id: LoopId, name: str, body: dict[str, Any] | None = None) -> Call[LoopOut]:
    """pause, resume, stop, freeze, unfreeze, observe: the loop afterwards."""
    return Call(
        "POST",
        f"/v1/loops/{loop_id}/{name}",
        _loop,
        json=body,
        idempotent=name in IDEMPOTENT_ACTIONS,
    )


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
    # Repeating the same decision is harmless (the API answers with the decided call).
    return Call("POST", f"/v1/tool-calls/{tool_call_id}/{verb}", _call, json=body, idempotent=True)


def fork(loop_id: LoopId, message_id: int, title: str | None) -> Call[LoopOut]:
    body = _some(message_id=message_id, title=title)
    return Call("POST", f"/v1/loops/{loop_id}/fork", _loop, json=body)


def regenerate(loop_id: LoopId, message_id: int) -> Call[LoopOut]:
    return Call("POST", f"/v1/loops/{loop_id}/regenerate", _loop, json={"message_id": message_id})


def agents() -> Call[list[dict[str, Any]]]:
    return Call("GET", "/v1/agents", lambda d: list(d["items"]))


def upgrade(loop_id: LoopId, to_version: str | None, dry_run: bool) -> Call[LoopUpgradeOut]:
    body = _some(to_version=to_version, dry_run=dry_run or None)
    return Call("POST", f"/v1/loops/{loop_id}/upgrade", LoopUpgradeOut.model_validate, json=body)


def upgrade_agent(
    agent: str, from_version: str | None, to_version: str | None, dry_run: bool
) -> Call[AgentUpgradeOut]:
    body = _some(from_version=from_version, to_version=to_version, dry_run=dry_run or None)
    return Call("POST", f"/v1/agents/{agent}/upgrade", AgentUpgradeOut.model_validate, json=body)


# --- state, feed, costs, providers, webhooks, input requests, schedules ------------------


def get_state(loop_id: LoopId) -> Call[StateOut]:
    return Call("GET", f"/v1/loops/{loop_id}/state", StateOut.model_validate)


def patch_state(
    loop_id: LoopId, patch: dict[str, Any], if_match: int | str | None
) -> Call[StateOut]:
    headers = {}
    if if_match is not None:
        headers["If-Match"] = "*" if if_match == "*" else f'"{if_match}"'
    return Call(
        "PATCH",
        f"/v1/loops/{loop_id}/state",
        StateOut.model_validate,
        json=patch,
        headers=headers,
    )


def feed(
    after: int | None, loop: LoopId | None, agent: str | None, types: list[str] | None, limit: int
) -> Call[Page[EventOut]]:
    params = _some(
        after=after,
        loop=str(loop) if loop is not None else None,
        agent=agent,
        types=",".join(types) if types else None,
        limit=limit,
    )
    return Call("GET", "/v1/events", Page[EventOut].model_validate, params=params)


def costs(since: datetime | None, until: datetime | None, agent: str | None) -> Call[CostsOut]:
    params = _some(
        since=since.isoformat() if since is not None else None,
        until=until.isoformat() if until is not None else None,
        agent=agent,
    )
    return Call("GET", "/v1/costs", CostsOut.model_validate, params=params)


def providers() -> Call[ProvidersOut]:
    return Call("GET", "/v1/providers", ProvidersOut.model_validate)


def webhooks() -> Call[list[EndpointOut]]:
    return Call("GET", "/v1/webhooks", lambda d: Page[EndpointOut].model_validate(d).items)


def webhook_deliveries(
    status: str | None, cursor: str | int | None, limit: int
) -> Call[Page[DeliveryOut]]:
    params = _some(status=status, cursor=cursor, limit=limit)
    return Call("GET", "/v1/webhook-deliveries", Page[DeliveryOut].model_validate, params=params)


def resend_delivery(delivery_id: int) -> Call[DeliveryOut]:
    return Call("POST", f"/v1/webhook-deliveries/{delivery_id}/resend", DeliveryOut.model_validate)


def input_requests(loop_id: LoopId) -> Call[list[InputRequestOut]]:
    return Call(
        "GET",
        f"/v1/loops/{loop_id}/inputs",
        lambda d: Page[InputRequestOut].model_validate(d).items,
    )


def answer_input(
    tool_call_id: int,
    action: str | None,
    content: dict[str, Any] | None,
    responses: dict[str, dict[str, Any]] | None,
) -> Call[ToolCallOut]:
    body = _some(action=action, content=content, responses=responses)
    # The same answer again is harmless (the API answers with the call).
    return Call("POST", f"/v1/tool-calls/{tool_call_id}/input", _call, json=body, idempotent=True)


def create_schedule(spec: dict[str, Any]) -> Call[ScheduleOut]:
    return Call("POST", "/v1/schedules", ScheduleOut.model_validate, json=_some(**spec))


def list_schedules() -> Call[list[ScheduleOut]]:
    return Call("GET", "/v1/schedules", lambda d: Page[ScheduleOut].model_validate(d).items)


def schedule(method: str, name: str, verb: str | None = None) -> Call[ScheduleOut]:
    """GET or DELETE a schedule, or POST its pause/resume."""
    path = f"/v1/schedules/{name}" + (f"/{verb}" if verb else "")
    return Call(method, path, ScheduleOut.model_validate, idempotent=True)


def start_many(items: list[dict[str, Any]]) -> Call[list[LoopOut]]:
    """POST /v1/loops:batch: each item as `start`'s arguments (`idempotency_key` in it)."""
    body = [
        {k: str(v) if k == "max_cost" else v for k, v in item.items() if v is not None}
        for item in items
    ]
    # Safe to send again when every item has a key: the retry answers with the same loops.
    keyed = bool(body) and all("idempotency_key" in x for x in body)
    return Call(
        "POST",
        "/v1/loops:batch",
        lambda d: [LoopOut.model_validate(x) for x in _members(d)["loops"]],
        json={"loops": body},
        idempotent=keyed,
    )


def _members(data: JSONValue) -> dict[str, Any]:
    assert isinstance(data, dict)
    return data

"""Client: the agentd REST API over httpx.Client (the same calls as AsyncClient)."""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any, TypeVar

import httpx
from httpx_sse import connect_sse

from agentd.client import errors, routes, streaming
from agentd.client._async import DEFAULT_URL, _headers
from agentd.client.fleet import _SyncFleet
from agentd.client.models import (
    EventOut,
    InputRequestOut,
    LoopOut,
    LoopUpgradeOut,
    MessageOut,
    Page,
    SentMessageOut,
    SentOut,
    StateOut,
    StreamEvent,
    ToolCallOut,
)
from agentd.client.routes import LoopId

R = TypeVar("R")


class Client(_SyncFleet):
    """`with Client(url, token) as agentd: loop = agentd.start(...)`.

    `token` defaults to AGENTD_API_TOKEN. Errors raise `agentd.client.errors` exceptions.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=_headers(token),
            timeout=timeout,
            transport=transport,
        )
        self.retries = retries

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _do(self, call: routes.Call[R]) -> R:
        attempt = 0
        while True:
            try:
                r = self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params or None,
                    headers=call.headers or None,
                )
                break
            except httpx.TransportError as exc:
                if attempt < self.retries and routes.retryable(call, exc):
                    attempt += 1
                    time.sleep(routes.retry_delay(attempt))
                    continue
                raise errors.TransportError(f"{call.method} {call.path}: {exc!r}") from exc
        if r.status_code >= 400:
            raise errors.from_response(r)
        return call.parse(r.json() if r.content else None)

    # --- loops ---------------------------------------------------------------------------

    def start(
        self,
        agent: str,
        message: str,
        *,
        subject: str | None = None,
        state: dict[str, Any] | None = None,
        observe: bool | None = None,
        max_tokens_total: int | None = None,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        idempotency_key: str | None = None,
        max_cost: Decimal | str | None = None,
    ) -> LoopOut:
        """Start a loop. Retrying with the same `idempotency_key` (and body) returns the
        loop the first attempt started instead of starting another."""
        return self._do(
            routes.start(
                agent,
                message,
                subject=subject,
                state=state,
                observe=observe,
                max_tokens_total=max_tokens_total,
                concurrency_key=concurrency_key,
                concurrency_limit=concurrency_limit,
                idempotency_key=idempotency_key,
                max_cost=max_cost,
            )
        )

    def get(self, loop_id: LoopId) -> LoopOut:
        return self._do(routes.get(loop_id))

    def list(
        self,
        *,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        include_state: bool = False,
        parent_id: LoopId | None = None,
    ) -> Page[LoopOut]:
        """One page, newest first; pass `page.next_cursor` as `cursor` for the next. Items
        carry `state` only with `include_state=True` (else None: `get()` has it);
        `parent_id`: only that loop's child loops."""
        return self._do(routes.list_loops(status, agent, limit, cursor, include_state, parent_id))

    def children(self, loop_id: LoopId) -> builtins.list[LoopOut]:
        """The child loops the loop's agent tools started, oldest first."""
        return self._do(routes.children(loop_id))

    def iter_loops(
        self, *, status: str | None = None, agent: str | None = None, page_size: int = 50
    ) -> Iterator[LoopOut]:
        """Every matching loop, newest first, following the cursors."""
        cursor: str | None = None
        while True:
            page = self.list(status=status, agent=agent, limit=page_size, cursor=cursor)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def messages(
        self, loop_id: LoopId, *, include_hidden: bool = False
    ) -> builtins.list[MessageOut]:
        return self._do(routes.messages(loop_id, include_hidden))

    def events(self, loop_id: LoopId, *, after: int = 0, limit: int = 100) -> Page[EventOut]:
        """Events oldest first; pass `int(page.next_cursor)` as `after` for the next page."""
        return self._do(routes.events(loop_id, after, limit))

    def send(
        self,
        loop_id: LoopId,
        content: str,
        *,
        mode: str | None = None,
        idempotency_key: str | None = None,
    ) -> SentOut:
        """Send a user message: a loop at rest continues with it; a working one takes it
        by `mode` ("queue", the default: when the run ends; "inject": at the next turn
        boundary; "interrupt": now, cancelling the turn in flight). The loop, plus `sent`
        (pending or applied)."""
        return self._do(routes.send(loop_id, content, mode, idempotency_key))

    def sent_messages(
        self, loop_id: LoopId, *, pending: bool = False
    ) -> builtins.list[SentMessageOut]:
        """The messages sent to the loop, oldest first (only pending ones if asked)."""
        return self._do(routes.sent_messages(loop_id, pending))

    def pause(self, loop_id: LoopId) -> LoopOut:
        return self._do(routes.action(loop_id, "pause"))

    def resume(
        self,
        loop_id: LoopId,
        *,
        from_: builtins.list[str] | None = None,
        max_steps: int | None = None,
        max_tokens_total: int | None = None,
        max_cost: Decimal | str | None = None,
    ) -> LoopOut:
        return self._do(routes.resume(loop_id, from_, max_steps, max_tokens_total, max_cost))

    def stop(self, loop_id: LoopId) -> LoopOut:
        return self._do(routes.action(loop_id, "stop"))

    def freeze(self, loop_id: LoopId) -> LoopOut:
        return self._do(routes.action(loop_id, "freeze"))

    def unfreeze(self, loop_id: LoopId) -> LoopOut:
        return self._do(routes.action(loop_id, "unfreeze"))

    def observe(self, loop_id: LoopId, observed: bool = True) -> LoopOut:
        return self._do(routes.action(loop_id, "observe", {"observed": observed}))

    def fork(self, loop_id: LoopId, message_id: int, *, title: str | None = None) -> LoopOut:
        """A new paused loop with the history up to `message_id`; resume it to run."""
        return self._do(routes.fork(loop_id, message_id, title))

    def regenerate(self, loop_id: LoopId, message_id: int) -> LoopOut:
        return self._do(routes.regenerate(loop_id, message_id))

    # --- approvals -----------------------------------------------------------------------

    def approvals(self, loop_id: LoopId) -> builtins.list[ToolCallOut]:
        return self._do(routes.approvals(loop_id))

    def approve(
        self,
        tool_call_id: int,
        *,
        reason: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> ToolCallOut:
        return self._do(routes.decide(tool_call_id, True, reason, arguments))

    def deny(self, tool_call_id: int, *, reason: str | None = None) -> ToolCallOut:
        return self._do(routes.decide(tool_call_id, False, reason, None))

    def get_state(self, loop_id: LoopId) -> StateOut:
        """The loop's state and its version (pass the version to patch_state)."""
        return self._do(routes.get_state(loop_id))

    def patch_state(
        self, loop_id: LoopId, patch: dict[str, Any], *, if_match: int | str | None = None
    ) -> StateOut:
        """JSON merge patch of the loop's state; `if_match` is the version it applies to
        (or "*"); a stale one raises PreconditionFailed."""
        return self._do(routes.patch_state(loop_id, patch, if_match))

    def input_requests(self, loop_id: LoopId) -> builtins.list[InputRequestOut]:
        """Tool calls whose MCP server asked for a person's input."""
        return self._do(routes.input_requests(loop_id))

    def answer_input(
        self,
        tool_call_id: int,
        *,
        action: str | None = None,
        content: dict[str, Any] | None = None,
        responses: dict[str, dict[str, Any]] | None = None,
    ) -> ToolCallOut:
        return self._do(routes.answer_input(tool_call_id, action, content, responses))

    def upgrade(
        self, loop_id: LoopId, *, to_version: str | None = None, dry_run: bool = False
    ) -> LoopUpgradeOut:
        """Move the loop to `to_version` (default: its agent's newest) at its next turn
        boundary; `dry_run`: only the diff. Raises Conflict (`upgrade-would-orphan`) while a pending
        call's tool would be renamed or gone."""
        return self._do(routes.upgrade(loop_id, to_version, dry_run))

    # --- live stream -----------------------------------------------------------------------

    def stream(
        self, loop_id: LoopId, *, max_reconnects: int = 10, read_timeout: float = 60.0
    ) -> Iterator[StreamEvent]:
        """The loop's live events until it completes, fails, stops or pauses.

        A dropped connection is resumed with Last-Event-ID; events already yielded are not
        yielded again. Gives up (TransportError) after `max_reconnects` attempts in a row
        that yield nothing.
        """
        state = streaming.Resumption()
        failures = 0
        timeout = httpx.Timeout(self._http.timeout.connect, read=read_timeout)
        while True:
            try:
                with connect_sse(
                    self._http,
                    "GET",
                    f"/v1/loops/{loop_id}/stream",
                    headers=state.headers(),
                    timeout=timeout,
                ) as source:
                    r = source.response
                    if r.status_code >= 400:
                        r.read()
                        err = errors.from_response(r)
                        if not isinstance(err, errors.Unavailable):
                            raise err
                        raise errors.TransportError(str(err))
                    for sse in source.iter_sse():
                        event = state.accept(sse.event, sse.id, sse.data)
                        if event is not None:
                            failures = 0
                            yield event
            except (httpx.TransportError, errors.TransportError) as exc:
                dropped: BaseException | None = exc
            else:
                dropped = None
            if state.finished:
                return
            failures += 1
            if failures > max_reconnects:
                raise errors.TransportError(
                    f"stream of loop {loop_id} dropped {failures} times in a row"
                ) from dropped
            time.sleep(streaming.backoff(failures))

    def start_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[LoopOut]:
        """Start 1 to 500 loops in one request, all or none (POST /v1/loops:batch); as
        AsyncClient.start_many."""
        return self._do(routes.start_many([dict(x) for x in items]))

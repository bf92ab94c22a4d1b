"""ToolDiscovery: opens the agent's MCP servers and records their sessions and tools.

Position: before NetworkCalling. Reads: ctx.agent. Writes: mcp_sessions, mcp_tools (fenced
by the turn's token), ctx.tools, ctx.tool_specs; during an MCP outage, the turn's deferral
(fenced) and a `turn.deferred` event. Finalizer: no. When every server's session is shared
by the process (`session = "process"`, or "auto" with a server without sessions) and the
stack finalizes with ResponseParsing (the stack builder decides it once, `defers_record`,
pipeline/stacks.py), the rows are left in ctx.unrecorded for the finalize to write with the
turn (no statement here).
Discovery runs on a loop's first turn (with refresh_mcp_tools), when the loop has no
sessions yet, when the set of server names changed, or when the tools were listed under
another agent version than the loop's (an upgrade may rename prefixes or whitelists: each
session records the version it was listed under); later turns read the stored tools, so a
prompt's tool list stays stable.
The stored sessions and tools come prefetched by the claim (ctx.prefetch) when it has them.
Guarantee: an outage (refused, reset, timed out, HTTP 5xx, a garbled answer) does not fail
the loop before `mcp_discovery_give_up_after`: discovery is retried a few times inside the
turn, then the turn is deferred (queued again on the same generation, due later, no worker
slot held) with a growing delay; a run of failures that long fails the loop, naming the
server and the last error. A permanent failure (see `retryable`) fails it at once.
Tolerates: pause/stop mid-retry (the wait is cancelled with the turn; the deferral is
fenced and writes nothing after a rotation); a worker dying mid-retry (the reaper re-runs
the turn and the run of failures goes on from its first deferral).
Never: holds a connection while it waits or talks to a server; swallows cancellation.
Called by: the LLM turn stack (pipeline/stacks.py).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx

from agentd import logs, redact
from agentd.agent import agent_mcp_configs
from agentd.db.pool import connection
from agentd.engine.context import TurnContext
from agentd.errors import AgentdError, FenceLost, ToolTimeout, ToolTransportError
from agentd.llm.types import ToolSpec
from agentd.mcp import shared_sessions
from agentd.mcp.config import McpServerConfig
from agentd.mcp.port import CallContext
from agentd.pipeline.builder import Handler
from agentd.pipeline.llm import deferral
from agentd.pipeline.wire import mcp_events
from agentd.store import events, mcp
from agentd.store.models import NewEvent

if TYPE_CHECKING:
    from agentd.mcp.toolbox import Toolbox
    from agentd.settings import Settings

log = logs.get("agentd.turn")

MCP_UNAVAILABLE = "mcp_unavailable"  # the deferral's status_reason and event reason
_RETRYABLE_4XX = frozenset({408, 425, 429})
_EVENT_PAGE = 500


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)


def retryable(exc: BaseException) -> bool:
    """May a failed discovery heal by itself, or would it fail the same way again?

    Retried: MCP transport failures (the port's contract: unreachable, timed out, garbled),
    i.e. `ToolTransportError` — refused or reset connections, HTTP 5xx/408/425/429, non-JSON
    or truncated answers, JSON-RPC errors, a forgotten session — and `ToolTimeout`.
    Not retried: HTTP 401/403/404 and other 4xx (a wrong URL or token), a stdio command
    that does not exist, errors raised with `retryable=False` (missing required_tools, a
    tool-name clash), ConfigError, and anything that is not an MCP error (an agent's
    mcp_servers() raising, a bug in a custom transport).
    """
    if not isinstance(exc, ToolTransportError | ToolTimeout):
        return False
    for e in _chain(exc):  # open_toolbox re-raises with the original as the cause
        if isinstance(e, FileNotFoundError | NotADirectoryError | PermissionError):
            return False
        details = e.details if isinstance(e, AgentdError) else {}
        if details.get("retryable") is False:
            return False
        status = details.get("http_status")
        if isinstance(status, int) and 400 <= status < 500 and status not in _RETRYABLE_4XX:
            return False
    return True


def _timed_out(exc: BaseException) -> bool:
    return any(
        isinstance(e, ToolTimeout | TimeoutError | httpx.TimeoutException) for e in _chain(exc)
    )


def _jittered(seconds: float) -> float:
    return seconds * random.uniform(0.8, 1.2)  # spreads a fleet's retries after an outage


@dataclass(frozen=True)
class Outage:
    """The loop's current run of discovery failures, as its event log shows it."""

    since: datetime | None  # the run's first deferral; None: this is the first failure
    deferrals: int


def retry_delay(settings: Settings, retry: int) -> float:
    """The wait before in-turn retry `retry` (1-based): base * 2**(retry-1), jittered."""
    return _jittered(settings.mcp_discovery_retry_delay * 2 ** min(retry - 1, 30))


def defer_until(settings: Settings, outage: Outage, now: datetime) -> datetime | None:
    """When the deferred turn should try again, or None: the outage lasted too long.

    The delay doubles with each deferral of the run, up to mcp_discovery_defer_max, and
    never passes the give-up deadline, so the last attempt is made right at it.
    """
    since = outage.since or now
    deadline = since + timedelta(seconds=settings.mcp_discovery_give_up_after)
    if now >= deadline:
        return None
    growing = settings.mcp_discovery_defer_delay * 2 ** min(outage.deferrals, 30)
    delay = min(_jittered(growing), settings.mcp_discovery_defer_max)
    return min(now + timedelta(seconds=delay), deadline)


async def outage_of(
    ctx: TurnContext, reason: str = MCP_UNAVAILABLE, *, wire_too: bool = False
) -> Outage:
    """Read the current run of failures from the loop's events (deferrals with `reason`;
    `wire_too`: wire logs, llm.request and mcp.*, neither start nor end a run, as for a
    model endpoint that is down: the turn's discovery and failed attempts log them).

    No column records it (and adding one would take a migration): each deferral writes a
    `turn.deferred` event with reason mcp_unavailable, and any other event of the loop —
    a successful discovery's mcp.* wire log, a model answer, a pause, resume or new
    message — ends the run. So the run started at the first such deferral after the last
    other event. Only read on this failure path; on a first turn (where discovery almost
    always runs) the loop has a handful of events.
    """
    since: datetime | None = None
    deferrals = 0
    after = 0
    async with connection(ctx.runtime.pool) as conn:
        while True:
            page = await events.list_(conn, loop_id=ctx.loop.id, after_id=after, limit=_EVENT_PAGE)
            for e in page:
                if wire_too and (e.name == "llm.request" or e.name.startswith("mcp.")):
                    continue
                if e.name == "turn.deferred" and e.reason == reason:
                    since = since or e.created_at
                    deferrals += 1
                else:
                    since, deferrals = None, 0
            if len(page) < _EVENT_PAGE:
                return Outage(since=since, deferrals=deferrals)
            after = page[-1].id


def _listed_under_other_version(
    ctx: TurnContext, sessions: list[dict[str, Any]], names: set[str]
) -> bool:
    """Whether the loop's stored tools were listed under another agent version than the
    one it runs now (an upgrade): their names may carry an old prefix, which the version's
    approval rules would not match. A listing that names no version was made before
    versions existed, under the version the loop was adopted with (an upgrade stamps its
    sessions with the version it leaves, store/sql/agent_versions.sql), so it stands: a
    new release alone never re-opens a loop's sessions."""
    version = ctx.loop.agent_version
    if version is None:
        return False
    seen = {
        (s.get("metadata") or {}).get("agent_version") for s in sessions if s["mcp_name"] in names
    }
    return bool(seen - {None, version})


def _all_shared(sessions: list[dict[str, Any]]) -> bool:
    """Is every session one the process shares (`session = "process"`, or "auto" with a
    server that issues no session id)? Then the rows describe the tools and no session of
    the loop's own, so they may wait for the finalize and be held for the next turn."""
    return bool(sessions) and all(
        (s.get("metadata") or {}).get(shared_sessions.SHARED_KEY) is True for s in sessions
    )


class ToolDiscovery:
    def __init__(self, app: Handler[TurnContext], *, defers_record: bool = False) -> None:
        self.app = app
        # ResponseParsing (or a subclass) finalizes further down the stack, and records a
        # discovery left in ctx.unrecorded with the turn (the stack builder says so).
        self.defers_record = defers_record

    async def __call__(self, ctx: TurnContext) -> None:
        assert ctx.agent is not None
        configs = await agent_mcp_configs(ctx.agent)
        ctx.mcp_timeouts = [c.timeout for c in configs]
        if configs:
            pre = ctx.prefetch
            if pre is not None:  # the claim read them; a steady-state turn queries nothing
                sessions, rows = pre.mcp_sessions, pre.mcp_tools
            else:
                async with connection(ctx.runtime.pool) as conn:
                    sessions = await mcp.list_sessions(conn, loop_id=ctx.loop.id)
                    rows = await mcp.list_tools(conn, loop_id=ctx.loop.id)
            fresh = ctx.loop.step_count == 0 and ctx.agent.refresh_mcp_tools
            known = {s["mcp_name"] for s in sessions}
            names = {c.name for c in configs}
            if fresh or known != names or _listed_under_other_version(ctx, sessions, names):
                discovered = await self._discover(ctx, configs)
                if discovered is None:
                    return  # deferred: the turn is queued again, due after a back-off
                rows, sessions = discovered
            ctx.tools = rows
            if _all_shared(sessions):  # nothing in the rows can change under the next turn
                ctx.shared_sessions = sessions
            ctx.tool_specs = [
                ToolSpec(
                    name=t.name,
                    description=t.description or "",
                    input_schema=t.input_schema or {"type": "object"},
                )
                for t in rows
            ]
        await self.app(ctx)

    async def _discover(
        self, ctx: TurnContext, configs: list[McpServerConfig]
    ) -> tuple[list[Any], list[dict[str, Any]]] | None:
        """The loop's tools and sessions as found; None: the turn was deferred."""
        box = await self._open(ctx, configs)
        if box is None:
            return None
        found = mcp.Discovered(
            sessions=[
                {
                    "mcp_name": name,
                    "session_id": s.session_id,
                    "transport_kind": s.transport_kind,
                    # the version the tools were listed under (see _listed_under_other_version)
                    "metadata": {**(s.metadata or {}), "agent_version": ctx.loop.agent_version},
                }
                for name, s in box.sessions.items()
            ],
            tools=[
                {
                    "server": t.server,
                    "name": t.name,
                    "remote_name": t.remote_name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                    "requires_approval": t.requires_approval,
                }
                for t in box.tools
            ],
        )
        wire = mcp_events(box.exchanges, loop_id=ctx.loop.id)
        if self.defers_record and _all_shared(found.sessions):
            # No server-side session is this loop's own (the session ender never ends
            # one): the rows go in with the turn's finalize, in its statement, where the
            # turn's tool calls are written; a turn that ends otherwise leaves them out and
            # the next discovers again (from the process's cache, without a request).
            ctx.unrecorded = found
            ctx.events.extend(wire)
            return found.rows(ctx.loop.id), found.sessions
        # One statement, fenced by the turn's token under the loop's row lock (loop first).
        async with connection(ctx.runtime.pool) as conn:
            rows = await mcp.record_discovery(
                conn,
                loop_id=ctx.loop.id,
                execution_token=ctx.execution_token,
                sessions=found.sessions,
                tools=found.tools,
                wire_events=wire,
            )
        if rows is None:
            raise FenceLost()
        return rows, found.sessions

    async def _open(self, ctx: TurnContext, configs: list[McpServerConfig]) -> Toolbox | None:
        """The agent's servers, opened; None: they are down and the turn was deferred."""
        from agentd.mcp.toolbox import open_toolbox

        assert ctx.agent is not None
        settings = ctx.runtime.settings
        context = CallContext(
            agent=ctx.agent, loop=ctx.loop_view, principal=ctx.agent.mcp_principal
        )
        retry = 0
        while True:
            try:
                return await open_toolbox(configs, context, hub=ctx.runtime.mcp)
            except Exception as exc:  # not CancelledError: a pause or stop ends the turn here
                if not retryable(exc):
                    raise
                assert isinstance(exc, AgentdError)
                # A timed-out attempt already waited `timeout`: hand the slot back instead.
                if retry >= settings.mcp_discovery_retries or _timed_out(exc):
                    await self._defer(ctx, exc)
                    return None
                retry += 1
                delay = retry_delay(settings, retry)
                log.info(
                    "mcp.discovery_retry",
                    loop_id=str(ctx.loop.id),
                    retry=retry,
                    delay=round(delay, 3),
                    error=redact.text(exc.message),
                )
            await asyncio.sleep(delay)  # the lease renewer keeps the turn's lease meanwhile

    async def _defer(self, ctx: TurnContext, exc: AgentdError) -> None:
        """Hand the turn back until the servers may be up, or fail: down for too long."""
        settings = ctx.runtime.settings
        error = redact.text(exc.message)  # names the server (open_toolbox's wording)
        outage = await outage_of(ctx)
        now = datetime.now(UTC)
        run_at = defer_until(settings, outage, now)
        if run_at is None:
            assert outage.since is not None
            waited = (now - outage.since).total_seconds()
            raise ToolTransportError(
                f"{error} (still failing after {waited:.0f}s of retries; "
                f"mcp_discovery_give_up_after={settings.mcp_discovery_give_up_after:g}s)"
            ) from exc
        note = NewEvent(
            name="turn.deferred",
            loop_id=ctx.loop.id,
            reason=MCP_UNAVAILABLE,
            log=f"{error}; next attempt at {run_at.isoformat()}",
        )
        if not await deferral.defer_turn(ctx, run_at, MCP_UNAVAILABLE, [note]):
            raise FenceLost()  # paused, stopped or reaped meanwhile: nothing was written
        log.warning(
            "turn.deferred",
            loop_id=str(ctx.loop.id),
            reason=MCP_UNAVAILABLE,
            deferrals=outage.deferrals + 1,
            until=run_at.isoformat(),
            error=error,
        )

"""MCP sessions and tool listings a worker process shares among its loops.

`session = "loop"` opens a session per loop and server (initialize, the initialized
notification, tools/list: three exchanges on its first turn), because a stateful server may
keep per-session state that must not leak between conversations. `session = "process"`
shares one session and one listing among every loop of the process. `session = "auto"`
(the default) lets the server decide: the first open per server is made once for every
loop waiting on it; a server that issues no `Mcp-Session-Id` (or speaks the stateless
2026-07-28 protocol) is then shared as with "process", and one that issues a session id
gets a session per loop, whose tools come from the listing cached per server and server
version (serverInfo name and version) while no `notifications/tools/list_changed` said
otherwise.

Shared sessions and listings are renewed once older than the server's `session_ttl`; a
shared session a call finds gone is replaced for every loop. Keyed by everything that
shapes a session (name, URL, credentials, headers, whitelist, required tools, prefix).
One `SharedSessions` per process, owned by its `McpHub` (mcp/hub.py). The shared session
is never ended with DELETE by the session ender (other loops use it); the server expires it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from agentd.mcp.config import McpServerConfig
from agentd.mcp.records import Exchange, McpTool, SessionInfo

Opened = tuple[SessionInfo, list[McpTool], list[Exchange]]

#: Set in a shared session's stored metadata: the session ender passes such rows over.
SHARED_KEY = "shared"

Key = tuple[Any, ...]


@dataclass
class _Entry:
    info: SessionInfo
    tools: list[McpTool]
    expires: float


@dataclass
class _Listing:
    server: tuple[str, str]  # serverInfo (name, version) the tools were listed from
    tools: list[McpTool]
    expires: float


def key_of(config: McpServerConfig) -> Key:
    return (
        config.name,
        config.url,
        config.api_token,
        tuple(sorted(config.headers.items())),
        None if config.tools is None else tuple(config.tools),
        tuple(config.required_tools),
        config.prefix,
    )


def server_of(info: SessionInfo) -> tuple[str, str]:
    """The server's identity from its initialize answer: serverInfo name and version."""
    server = info.metadata.get("serverInfo")
    server = server if isinstance(server, dict) else {}
    return str(server.get("name") or ""), str(server.get("version") or "")


def _own(info: SessionInfo) -> SessionInfo:
    """A copy of `info` whose metadata its holder may amend, without the exchanges."""
    return replace(info, metadata=dict(info.metadata), exchanges=[])


class SharedSessions:
    """The process's shared sessions, tool listings and per-server verdicts."""

    def __init__(self) -> None:
        self._entries: dict[Key, _Entry] = {}
        #: the open in flight per server: the loops that need it meanwhile wait for its end
        self._opening: dict[Key, asyncio.Future[None]] = {}
        #: "auto": servers found to issue session ids, until when the verdict holds
        self._stateful: dict[Key, float] = {}
        self._listings: dict[Key, _Listing] = {}

    async def open_shared(
        self,
        config: McpServerConfig,
        open_new: Callable[[], Awaitable[Opened]],
        *,
        share: Callable[[SessionInfo], bool] = lambda info: True,
    ) -> Opened | None:
        """The process's session with `config`'s server, opened by `open_new` when there is
        none or it has expired. One loop opens it while the others wait for that one
        attempt: they share its session, or its error (so a server that hangs costs each of
        them one timeout, not one each in turn). Only the opener's result carries the
        exchanges (its wire log). An opener cancelled (its loop paused) hands the open to a
        waiter. A session `share` refuses stays the opener's, and the server is marked
        stateful: the waiters then get None (each opens its own)."""
        key = key_of(config)
        while True:
            entry = self._entries.get(key)
            if entry is not None and entry.expires > time.monotonic():
                return _own(entry.info), list(entry.tools), []
            if self.stateful(config):
                return None
            attempt = self._opening.get(key)
            if attempt is None:
                break
            try:
                await asyncio.shield(attempt)
            except asyncio.CancelledError:
                if not attempt.cancelled():
                    raise  # this loop was cancelled, not the opener
            # Opened (the entry or verdict is there now) or the opener was cancelled.
        attempt = asyncio.get_running_loop().create_future()
        # Waiters read the error; with none, reading it here keeps asyncio from logging it.
        attempt.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._opening[key] = attempt
        try:
            info, tools, exchanges = await open_new()
            expires = time.monotonic() + config.session_ttl
            if share(info):
                info.metadata[SHARED_KEY] = True
                self._entries[key] = _Entry(_own(info), list(tools), expires)
            else:
                self._stateful[key] = expires
        except asyncio.CancelledError:
            attempt.cancel()
            raise
        except BaseException as exc:
            attempt.set_exception(exc)
            raise
        else:
            attempt.set_result(None)
        finally:
            if self._opening.get(key) is attempt:
                del self._opening[key]
        return info, tools, exchanges

    def stateful(self, config: McpServerConfig) -> bool:
        """Has `config`'s server been found to issue session ids (and not long ago)?"""
        until = self._stateful.get(key_of(config))
        return until is not None and until > time.monotonic()

    def listing(self, config: McpServerConfig, info: SessionInfo) -> list[McpTool] | None:
        """The tools last listed from this server at this version, if still fresh."""
        found = self._listings.get(key_of(config))
        if found is None or found.expires <= time.monotonic() or found.server != server_of(info):
            return None
        return list(found.tools)

    def keep_listing(
        self, config: McpServerConfig, info: SessionInfo, tools: list[McpTool]
    ) -> None:
        expires = time.monotonic() + config.session_ttl
        self._listings[key_of(config)] = _Listing(server_of(info), list(tools), expires)

    def tools_changed(self, config: McpServerConfig) -> None:
        """`notifications/tools/list_changed`: the next loop lists the tools again."""
        key = key_of(config)
        self._listings.pop(key, None)
        self._entries.pop(key, None)  # a shared session is cheap to open again with its list

    def current(self, config: McpServerConfig) -> str | None:
        """The shared session id now (a recovery elsewhere may have replaced a loop's)."""
        entry = self._entries.get(key_of(config))
        return None if entry is None else entry.info.session_id

    def replaced(self, config: McpServerConfig, old: str, new: str) -> None:
        """A call found `old` gone and opened `new`: every loop uses `new` from now on."""
        entry = self._entries.get(key_of(config))
        if entry is not None and entry.info.session_id == old:
            entry.info = replace(entry.info, session_id=new)

    def now_stateful(self, config: McpServerConfig) -> None:
        """ "auto": a shared server answered a recovery with a session id of its own; later
        loops open their own sessions (this one keeps the id it got)."""
        key = key_of(config)
        self._entries.pop(key, None)
        self._stateful[key] = time.monotonic() + config.session_ttl

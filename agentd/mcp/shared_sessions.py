"""MCP sessions a worker process shares among its loops (`session = "process"`).

By default every loop opens its own session with each HTTP server (initialize, the
initialized notification, tools/list: three exchanges on its first turn), because a
stateful server may keep per-session state that must not leak between conversations.
A server whose tools keep no such state can be marked `session = "process"`: then one
session, and one tool listing, serve every loop of the process. A loop's first turn takes
them from here (no exchange at all) and records them on its own rows as usual; they are
opened again once older than the server's `session_ttl`, or at once when a call finds the
session gone (the recovered id replaces the shared one, so the next call of any loop uses
it).

Keyed by everything that shapes the session (name, URL, credentials, headers, whitelist,
prefix) and held per event loop, so two engines in one process (tests) never share a lock.
The shared session is never ended with DELETE by the session ender (other loops use it);
the server expires it when the process is gone.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
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
class _Store:
    entries: dict[Key, _Entry] = field(default_factory=dict)
    #: the open in flight per server: the loops that need it meanwhile wait for its end
    opening: dict[Key, asyncio.Future[None]] = field(default_factory=dict)


_STORES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Store] = weakref.WeakKeyDictionary()


def key_of(config: McpServerConfig) -> Key:
    return (
        config.name,
        config.url,
        config.api_token,
        tuple(sorted(config.headers.items())),
        None if config.tools is None else tuple(config.tools),
        config.prefix,
    )


def _store() -> _Store:
    loop = asyncio.get_running_loop()
    found = _STORES.get(loop)
    if found is None:
        found = _STORES[loop] = _Store()
    return found


def _own(info: SessionInfo) -> SessionInfo:
    """A copy of `info` whose metadata its holder may amend, without the exchanges."""
    return replace(info, metadata=dict(info.metadata), exchanges=[])


def _copy(entry: _Entry) -> Opened:
    """A loop's own copy of the shared session (its rows store the metadata)."""
    return _own(entry.info), list(entry.tools), []


async def open_shared(config: McpServerConfig, open_new: Callable[[], Awaitable[Opened]]) -> Opened:
    """The process's session with `config`'s server, opened by `open_new` when there is
    none or it has expired. One loop opens it while the others wait for that one attempt:
    they share its session, or its error (so a server that hangs costs each of them one
    timeout, not one each in turn). Only the opener's result carries the exchanges (its
    wire log). An opener cancelled (its loop paused) hands the open to a waiter."""
    store, key = _store(), key_of(config)
    while True:
        entry = store.entries.get(key)
        if entry is not None and entry.expires > time.monotonic():
            return _copy(entry)
        attempt = store.opening.get(key)
        if attempt is None:
            break
        try:
            await asyncio.shield(attempt)
        except asyncio.CancelledError:
            if not attempt.cancelled():
                raise  # this loop was cancelled, not the opener
        # Opened (the entry is there now) or the opener was cancelled: look again.
    attempt = asyncio.get_running_loop().create_future()
    # Waiters read the error; with none, reading it here keeps asyncio from logging it.
    attempt.add_done_callback(lambda f: f.cancelled() or f.exception())
    store.opening[key] = attempt
    try:
        info, tools, exchanges = await open_new()
        info.metadata[SHARED_KEY] = True
        expires = time.monotonic() + config.session_ttl
        store.entries[key] = _Entry(_own(info), list(tools), expires)
    except asyncio.CancelledError:
        attempt.cancel()
        raise
    except BaseException as exc:
        attempt.set_exception(exc)
        raise
    else:
        attempt.set_result(None)
    finally:
        if store.opening.get(key) is attempt:
            del store.opening[key]
    return info, tools, exchanges


def current(config: McpServerConfig) -> str | None:
    """The shared session id now (a recovery elsewhere may have replaced a loop's)."""
    entry = _store().entries.get(key_of(config))
    return None if entry is None else entry.info.session_id


def replaced(config: McpServerConfig, old: str, new: str) -> None:
    """A call found `old` gone and opened `new`: every loop uses `new` from now on."""
    entry = _store().entries.get(key_of(config))
    if entry is not None and entry.info.session_id == old:
        entry.info = replace(entry.info, session_id=new)

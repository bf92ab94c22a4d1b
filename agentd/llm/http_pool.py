"""`pooled_client`: the httpx client agentd's model and MCP calls share, made cheap per request.

httpx stays the HTTP client; what changes is httpcore's network backend. The default one
goes through anyio, and httpcore's pool asks every pooled connection "has the server closed
you?" on every request it assigns and every response it closes. Through anyio each answer
builds a dict of attribute lambdas, calls `getpeername()` and `poll()`: two syscalls per
pooled connection per pool event, the largest single cost of a request on a busy worker
(bench B11). This backend speaks plain asyncio streams and answers from state the event loop
already keeps: an idle connection's reader has seen EOF or unread bytes, or its transport is
closing. Same errors as httpcore's own backends (`httpcore.ReadError` & co., mapped by httpx).
"""

# httpcore's AsyncNetworkStream/Backend interface takes `timeout=` arguments.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx
from httpcore._async.connection_pool import PoolByteStream
from httpcore._async.http11 import HTTPConnectionState
from httpcore._backends.base import SOCKET_OPTION


@contextlib.contextmanager
def _mapped(timeout_error: type[Exception], os_error: type[Exception]) -> Iterator[None]:
    try:
        yield
    except TimeoutError as exc:
        raise timeout_error(str(exc) or type(exc).__name__) from exc
    except (OSError, ssl.SSLError) as exc:
        raise os_error(str(exc) or type(exc).__name__) from exc


# Writes are held up to this many bytes and go out together before the next read: httpcore
# writes a request's head, then its body, then reads the response, so a request is one
# send() (one syscall, one packet on a TCP_NODELAY socket) instead of two. A larger body
# still goes out as it is written, with back-pressure.
_HOLD_BYTES = 64 * 1024


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One TCP (or TLS) connection as asyncio's StreamReader/StreamWriter."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._held: list[bytes] = []
        self._held_bytes = 0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held:
            # As httpcore does with a failed request write: the server may have answered
            # and closed early, so read its response (or the close) rather than fail here.
            with contextlib.suppress(httpcore.WriteError):
                await self._flush(timeout)
        with _mapped(httpcore.ReadTimeout, httpcore.ReadError):
            if timeout is None:
                return await self._reader.read(max_bytes)
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._writer.transport.is_closing():  # fail now, as an unheld write would
            raise httpcore.WriteError("connection closed")
        self._held.append(buffer)
        self._held_bytes += len(buffer)
        if self._held_bytes >= _HOLD_BYTES:
            await self._flush(timeout)

    async def _flush(self, timeout: float | None) -> None:
        buffer = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held = []
        self._held_bytes = 0
        with _mapped(httpcore.WriteTimeout, httpcore.WriteError):
            if self._writer.transport.is_closing():
                raise ConnectionResetError("connection closed")
            self._writer.write(buffer)
            if self._writer.transport.get_write_buffer_size() == 0:
                return  # all of it went to the socket: nothing to wait for
            if timeout is None:
                await self._writer.drain()
                return
            async with asyncio.timeout(timeout):
                await self._writer.drain()

    async def aclose(self) -> None:
        # As anyio's stream does: close, let the loop flush once, then drop what is left, so
        # a peer that stopped reading cannot hold the pool.
        self._writer.close()
        try:
            await asyncio.sleep(0)
        finally:  # a cancel landing here still drops the connection
            self._writer.transport.abort()

    def abort(self) -> None:
        """Drop the connection now (no await: nothing can interrupt it)."""
        self._writer.transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            try:
                await self._writer.start_tls(
                    ssl_context, server_hostname=server_hostname, ssl_handshake_timeout=timeout
                )
            except BaseException:
                self._writer.transport.abort()
                raise
        return self

    def get_extra_info(self, info: str) -> Any:
        w = self._writer
        if info == "is_readable":
            # Asked of idle connections only: anything the server sent (EOF included) or a
            # transport going away means it is done with this connection.
            r = self._reader
            return bool(
                r.at_eof() or r._buffer or r.exception() is not None or w.transport.is_closing()  # type: ignore[attr-defined]
            )
        if info == "ssl_object":
            return w.get_extra_info("ssl_object")
        if info == "client_addr":
            return w.get_extra_info("sockname")
        if info == "server_addr":
            return w.get_extra_info("peername")
        if info == "socket":
            return w.get_extra_info("socket")
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None
                )
            sock = writer.get_extra_info("socket")
            for option in socket_options or ():
                sock.setsockopt(*option)
            # asyncio sets TCP_NODELAY on its TCP transports already.
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        with _mapped(httpcore.ConnectTimeout, httpcore.ConnectError):
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path)
            sock = writer.get_extra_info("socket")
            for option in socket_options or ():
                sock.setsockopt(*option)
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


# How often the pool looks over every connection for closed and expired ones when nothing
# else makes it (a full pool, more idle connections than it keeps): a connection is always
# checked before a request is given to it, so this only bounds how long an idle connection
# the server dropped, or whose keep-alive ran out, holds its socket and its place.
_SWEEP_EVERY = 1.0


class _PoolByteStream(PoolByteStream):
    """httpcore's response stream, whose close always gives the connection back or cuts it.

    httpcore shields its close with anyio's `CancelScope(shield=True)`, which does not hold
    off asyncio's own `Task.cancel()`: a second cancel landing in the close (waiting for
    the connection's state lock, say) ends it before the connection is closed or the
    request leaves the pool, and the provider goes on streaming into a socket nobody reads,
    to the end of its answer (and bills it)."""

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            self._pool._settle(self._pool_request)  # type: ignore[attr-defined]


class _Pool(httpcore.AsyncConnectionPool):
    """httpcore's pool with its bookkeeping made cheap. httpcore's own, on every request
    assigned and every response closed (twice a request), asked every connection whether
    it was closed or expired and built the list of every available one for each queued
    request: ~14 connections a time on B11's worker, a larger share of a request's cost
    than any other part of the pool. Here the connection a request gets is the first
    available one for its origin, itself checked for expiry first (a server's close of an
    idle connection is seen there, as before); the whole pool is looked over at most once
    a second, and at once when it is full or holds more idle connections than it keeps."""

    _swept_at = float("-inf")

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        try:
            response = await super().handle_async_request(request)
        except BaseException:
            # A cancel landing in httpcore's (unshielded) cleanup leaves the connection
            # open and busy with no request on it: cut every such one.
            self._cut_orphans()
            raise
        response.stream.__class__ = _PoolByteStream  # same state, aclose made whole
        return response

    def _settle(self, pool_request: Any) -> None:
        """After a response's close, however it ended: the request has left the pool, and
        its connection is idle, closed, or cut."""
        with contextlib.suppress(ValueError):
            self._requests.remove(pool_request)  # a cancel cut the close short of it
        connection = pool_request.connection
        if connection is not None and self._orphaned(connection):
            self._cut(connection)

    def _orphaned(self, connection: Any) -> bool:
        """Busy (neither idle nor closed) with no request of the pool on it."""
        if connection.is_idle() or connection.is_closed():
            return False
        return not any(r.connection is connection for r in self._requests)

    def _cut_orphans(self) -> None:
        for connection in [c for c in self._connections if self._orphaned(c)]:
            self._cut(connection)

    def _cut(self, connection: Any) -> None:
        """Drop the connection at once and take it out of the pool."""
        with contextlib.suppress(ValueError):
            self._connections.remove(connection)
        inner = getattr(connection, "_connection", None)  # the HTTP/1.1 (or /2) connection
        stream = getattr(inner, "_network_stream", None)
        if isinstance(stream, AsyncioStream):
            stream.abort()
        if inner is not None and hasattr(inner, "_state"):
            inner._state = HTTPConnectionState.CLOSED

    def _assign_requests_to_connections(self) -> list[Any]:
        closing: list[Any] = []
        conns = self._connections
        now = time.monotonic()
        if now - self._swept_at >= _SWEEP_EVERY or len(conns) > self._max_keepalive_connections:
            self._sweep(closing, now)
        for pool_request in self._requests:
            if not pool_request.is_queued():
                continue
            origin = pool_request.request.url.origin
            connection = self._available(origin, closing)
            if connection is None and len(conns) >= self._max_connections:
                # Full: a closed or expired connection may hold the place a new one needs.
                self._sweep(closing, now)
                connection = self._available(origin, closing)
            if connection is not None:
                pool_request.assign_to_connection(connection)
            elif len(conns) < self._max_connections:
                connection = self.create_connection(origin)
                conns.append(connection)
                pool_request.assign_to_connection(connection)
            else:
                idle = next((c for c in conns if c.is_idle()), None)
                if idle is not None:
                    conns.remove(idle)
                    closing.append(idle)
                    connection = self.create_connection(origin)
                    conns.append(connection)
                    pool_request.assign_to_connection(connection)
        return closing

    def _sweep(self, closing: list[Any], now: float) -> None:
        """httpcore's pass: drop closed connections, close expired ones and idle ones past
        max_keepalive."""
        self._swept_at = now
        conns = self._connections
        for connection in list(conns):
            if connection.is_closed():
                conns.remove(connection)
            elif connection.has_expired() or (
                connection.is_idle() and len(conns) > self._max_keepalive_connections
            ):
                conns.remove(connection)
                closing.append(connection)

    def _available(self, origin: Any, closing: list[Any]) -> Any:
        """The first available connection to `origin` that has not expired (the expired
        ones met on the way are closed), or None."""
        conns = self._connections
        expired: list[Any] = []
        found = None
        for connection in conns:
            if connection.is_available() and connection.can_handle_request(origin):
                if connection.has_expired():
                    expired.append(connection)
                    continue
                found = connection
                break
        for connection in expired:
            conns.remove(connection)
            closing.append(connection)
        return found


def use_asyncio(client: httpx.AsyncClient) -> httpx.AsyncClient:
    """Put `client`'s direct connections on the asyncio backend and the linear pool
    (proxied ones keep httpx's own); a client of another shape is returned as it was."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    if (
        type(pool) is httpcore.AsyncConnectionPool
        and hasattr(pool, "_network_backend")
        and callable(getattr(pool, "_assign_requests_to_connections", None))
    ):
        pool.__class__ = _Pool  # same state, one method replaced
        pool._network_backend = AsyncioBackend()
    return client


def pooled_client(*, max_connections: int, max_keepalive: int, **kwargs: Any) -> httpx.AsyncClient:
    """An AsyncClient with keep-alive on and the asyncio backend; `kwargs` go to AsyncClient
    (timeout, follow_redirects, ...), and the environment's proxies are honoured as usual."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_keepalive)
    return use_asyncio(httpx.AsyncClient(limits=limits, **kwargs))

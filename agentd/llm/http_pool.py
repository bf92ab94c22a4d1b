"""`pooled_client`: the httpx client agentd's model and MCP calls share, made cheap per request.

httpx stays the HTTP client (its request and response model, errors, redirects, timeouts);
under it, `AsyncioTransport` pools httpcore's public `AsyncHTTP11Connection`s over
`http_backend.AsyncioBackend` (plain asyncio streams). Measured against httpx's own
transport (httpcore's pool on anyio), the pool costs a request no scan of the other
connections and no anyio lock, event or cancel scope of its own, and a request's
connection leaves it in one synchronous step however the request ends, so a call
cancelled twice still cuts the provider's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import urllib.request
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from typing import Any

import httpcore
import httpx

from agentd.llm.http_backend import AsyncioBackend, AsyncioStream

# How often the pool looks over its idle connections for ones the server closed or whose
# keep-alive ran out, when nothing else makes it: the connection a request gets is always
# checked itself, so this only bounds how long such a connection holds its socket.
_SWEEP_EVERY = 1.0

# httpcore's errors as httpx's, most specific first (httpx's own transport does the same).
_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for theirs, ours in _ERRORS:
            if isinstance(exc, theirs):
                raise ours(str(exc)) from exc
        raise


class _Conn:
    """A pooled HTTP/1.1 connection and the stream under it (to cut it without an await)."""

    __slots__ = ("http", "key", "stream")

    def __init__(
        self, http: httpcore.AsyncHTTP11Connection, stream: AsyncioStream, key: Any
    ) -> None:
        self.http, self.stream, self.key = http, stream, key


class AsyncioTransport(httpx.AsyncBaseTransport):
    """httpx's transport for direct HTTP/1.1 connections: a pool of httpcore's
    `AsyncHTTP11Connection`s over `AsyncioBackend`, under httpx's `Limits`.

    A request gets the most recently used idle connection to its origin, checked first
    (a server's close or a run-out keep-alive is seen there); a new one while the pool
    holds fewer than `max_connections`; else an idle one to another origin is closed for
    it; else it waits (FIFO, up to the pool timeout). At most `max_keepalive_connections`
    stay idle. No request bookkeeping scans the pool: idle connections are looked over at
    most once a second.

    However a request ends (done, failed, cancelled, cancelled again inside its own
    cleanup), its connection leaves it in one synchronous step: idle back to the pool, or
    cut at once. A connection cut short is never left open, so the provider stops
    streaming (and billing) at once."""

    def __init__(self, *, ssl_context: ssl.SSLContext, limits: httpx.Limits) -> None:
        self._ssl = ssl_context
        self._ssl.set_alpn_protocols(["http/1.1"])
        self._max = limits.max_connections if limits.max_connections is not None else 1 << 30
        keep = limits.max_keepalive_connections
        self._max_idle = self._max if keep is None else min(keep, self._max)
        self._expiry = limits.keepalive_expiry
        self._backend = AsyncioBackend()
        self._idle: dict[Any, list[_Conn]] = {}
        self._n_idle = 0
        self._busy: set[_Conn] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._swept_at = float("-inf")
        self._closed = False

    @property
    def connections(self) -> list[httpcore.AsyncHTTP11Connection]:
        """Every connection in the pool, busy ones first."""
        idle = [c.http for conns in self._idle.values() for c in conns]
        return [c.http for c in self._busy] + idle

    @property
    def in_use(self) -> int:
        """Connections given to a request whose response is not closed yet."""
        return len(self._busy)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(f"unsupported protocol {url.scheme!r}: {url}")
        assert isinstance(request.stream, httpx.AsyncByteStream)
        req = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        key = (scheme, url.raw_host, url.port)
        with _httpx_errors():
            conn = await self._acquire(key, req)
            try:
                response = await conn.http.handle_async_request(req)
            except BaseException:
                self._release(conn)
                raise
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(self, conn, response.stream),
            extensions=response.extensions,
        )

    async def _acquire(self, key: Any, request: httpcore.Request) -> _Conn:
        timeout = request.extensions.get("timeout", {}).get("pool")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._closed:
                raise httpcore.ConnectError("the connection pool is closed")
            conn = self._take_idle(key)
            if conn is not None:
                self._busy.add(conn)
                return conn
            if self._count() >= self._max:
                self._drop_an_idle()
            if self._count() < self._max:
                self._opening += 1
                try:
                    conn = await self._connect(key, request)
                except BaseException:
                    self._opening -= 1
                    self._wake()
                    raise
                self._opening -= 1
                self._busy.add(conn)
                return conn
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except BaseException as exc:
                if not waiter.done() or waiter.cancelled():
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                else:  # woken, but leaving: pass the turn on
                    self._wake()
                if isinstance(exc, TimeoutError):
                    raise httpcore.PoolTimeout("no connection free in the pool") from exc
                raise

    async def _connect(self, key: Any, request: httpcore.Request) -> _Conn:
        timeout = request.extensions.get("timeout", {}).get("connect")
        origin = request.url.origin
        host = origin.host.decode("ascii")
        stream = await self._backend.connect_tcp(host, origin.port, timeout=timeout)
        if origin.scheme == b"https":
            sni = request.extensions.get("sni_hostname") or host
            stream = await stream.start_tls(self._ssl, server_hostname=sni, timeout=timeout)
        assert isinstance(stream, AsyncioStream)
        http = httpcore.AsyncHTTP11Connection(
            origin=origin, stream=stream, keepalive_expiry=self._expiry
        )
        return _Conn(http, stream, key)

    def _count(self) -> int:
        return self._n_idle + len(self._busy) + self._opening

    def _take_idle(self, key: Any) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            self._n_idle -= 1
            if not conn.http.has_expired():
                return conn
            conn.stream.close()
        return None

    def _drop_an_idle(self) -> None:
        """Close the longest-idle connection of the first origin that has one."""
        for conns in self._idle.values():
            if conns:
                conns.pop(0).stream.close()
                self._n_idle -= 1
                return

    def _release(self, conn: _Conn) -> None:
        """The request on `conn` is over, however it ended: back to the pool if idle,
        else cut (a cancel cut its cleanup short, or the response was not read to the end)."""
        self._busy.discard(conn)
        # An idle connection is kept past max_keepalive when a request waits: it is the
        # one the woken request takes (or closes, for another origin, to make room).
        keep = self._n_idle < self._max_idle or self._waiters
        if conn.http.is_idle() and keep and not self._closed:
            self._idle.setdefault(conn.key, []).append(conn)
            self._n_idle += 1
        elif conn.http.is_idle():
            conn.stream.close()
        else:
            conn.stream.abort()
        now = time.monotonic()
        if now - self._swept_at >= _SWEEP_EVERY:
            self._sweep(now)
        self._wake()

    def _sweep(self, now: float) -> None:
        """Close idle connections the server closed or whose keep-alive ran out, and the
        longest-idle ones past max_keepalive."""
        self._swept_at = now
        while self._n_idle > self._max_idle and not self._waiters:
            self._drop_an_idle()
        for key, conns in list(self._idle.items()):
            kept = []
            for conn in conns:
                if conn.http.has_expired():
                    conn.stream.close()
                else:
                    kept.append(conn)
            self._n_idle -= len(conns) - len(kept)
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn.stream.close()
        self._idle.clear()
        self._n_idle = 0
        for conn in self._busy:
            conn.stream.abort()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # it finds the pool closed


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, pool: AsyncioTransport, conn: _Conn, stream: AsyncIterable[bytes]) -> None:
        self._pool = pool
        self._conn: _Conn | None = conn
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            with _httpx_errors():
                await self._stream.aclose()  # type: ignore[attr-defined]
        finally:
            self._pool._release(conn)


def _env_proxies() -> bool:
    return any(urllib.request.getproxies().get(s) for s in ("http", "https", "all"))


def pooled_client(
    *,
    max_connections: int,
    max_keepalive: int,
    keepalive_expiry: float = 5.0,
    verify: ssl.SSLContext | bool = True,
    trust_env: bool = True,
    **kwargs: Any,
) -> httpx.AsyncClient:
    """An AsyncClient on `AsyncioTransport`; `kwargs` go to AsyncClient (timeout,
    follow_redirects, ...). Where the environment names a proxy (and `trust_env`), httpx's
    own transport carries every request, so proxies and NO_PROXY work as httpx has them."""
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_keepalive,
        keepalive_expiry=keepalive_expiry,
    )
    if trust_env and _env_proxies():
        return httpx.AsyncClient(limits=limits, verify=verify, **kwargs)
    ssl_context = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
    transport = AsyncioTransport(ssl_context=ssl_context, limits=limits)
    return httpx.AsyncClient(transport=transport, trust_env=trust_env, **kwargs)

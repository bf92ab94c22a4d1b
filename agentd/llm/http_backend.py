"""httpcore's network backend on plain asyncio streams, for `agentd.llm.http_pool`.

httpcore's default backend goes through anyio, and its pool asks each pooled connection
"has the server closed you?" (`is_readable`) before reusing it. Through anyio each answer
builds a dict of attribute lambdas, calls `getpeername()` and `poll()`: two syscalls a
check, the largest single cost of a request on a busy worker (bench B11). This backend
answers from state the event loop already keeps: an idle connection's reader has seen EOF
or unread bytes, or its transport is closing. It raises httpcore's own errors
(`httpcore.ReadError` & co.), as httpcore's backends do.
"""

# httpcore's AsyncNetworkStream/Backend interface takes `timeout=` arguments.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore


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
    """One TCP (or TLS) connection as asyncio's StreamReader/StreamWriter.

    A read's timeout is one timer per connection, pushed back lazily: a streamed answer
    reads once per event, and `asyncio.timeout` around each read (a timer handle made,
    pushed on the loop's heap and cancelled every time) was a tenth of a streaming worker's
    CPU. The timer fires at the earliest deadline it was armed for; a read still waiting
    past its own deadline is cancelled into `httpcore.ReadTimeout`, and otherwise the timer
    re-arms for the deadline that is due (or stops, with no read waiting).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._loop = asyncio.get_running_loop()
        self._deadline = 0.0  # the waiting read's (loop clock)
        self._waiting: asyncio.Task[Any] | None = None  # the task of a read that waits
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held:
            # As httpcore does with a failed request write: the server may have answered
            # and closed early, so read its response (or the close) rather than fail here.
            with contextlib.suppress(httpcore.WriteError):
                await self._flush(timeout)
        reader = self._reader
        try:
            if timeout is None or reader._buffer or reader.at_eof():  # type: ignore[attr-defined]
                return await reader.read(max_bytes)  # no wait: no timer
            return await self._timed_read(max_bytes, timeout)
        except (OSError, ssl.SSLError) as exc:
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc

    async def _timed_read(self, max_bytes: int, timeout: float) -> bytes:
        task = asyncio.current_task()
        assert task is not None
        self._deadline = deadline = self._loop.time() + timeout
        timer = self._timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._timer = self._loop.call_at(deadline, self._expire)
        self._waiting = task
        cancelling = task.cancelling()
        try:
            return await self._reader.read(max_bytes)
        except asyncio.CancelledError:
            if self._expired:
                self._expired = False
                if task.uncancel() <= cancelling:
                    raise httpcore.ReadTimeout("timed out") from None
            raise
        finally:
            self._waiting = None

    def _expire(self) -> None:
        self._timer = None
        if self._waiting is None:
            return  # no read waits: the next one arms the timer again
        if self._loop.time() < self._deadline:
            self._timer = self._loop.call_at(self._deadline, self._expire)
            return
        self._expired = True
        self._waiting.cancel()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

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
        self._stop_timer()
        self._writer.close()
        try:
            await asyncio.sleep(0)
        finally:  # a cancel landing here still drops the connection
            self._writer.transport.abort()

    def close(self) -> None:
        """Close an idle connection (nothing left to send) without an await."""
        self._stop_timer()
        self._writer.close()

    def abort(self) -> None:
        """Drop the connection now (no await: nothing can interrupt it)."""
        self._stop_timer()
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
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
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
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
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

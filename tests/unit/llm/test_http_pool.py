"""agentd.llm.http_pool: httpx on agentd's asyncio transport keeps httpx's behaviour —
keep-alive reuse, a server-closed idle connection replaced, limits, httpx's error types, TLS."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest

from agentd.llm import http_backend, http_pool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


class Server:
    def __init__(self, handler: Handler, ssl_ctx: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl = ssl_ctx
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.ssl else 'http'}://127.0.0.1:{port}/"


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        await _read_request(reader)
        writer.write(OK)
        await writer.drain()


async def one_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    writer.write(OK)  # no `Connection: close`: the client keeps it, then sees the FIN
    await writer.drain()


def _transport(**limits: Any) -> http_pool.AsyncioTransport:
    return http_pool.AsyncioTransport(
        ssl_context=httpx.create_ssl_context(), limits=httpx.Limits(**limits)
    )


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with http_pool.pooled_client(max_connections=10, max_keepalive=10) as c:
        yield c


async def test_requests_run_on_the_asyncio_backend(client: httpx.AsyncClient) -> None:
    async with Server(keep_alive) as s:
        r = await client.get(s.url)
    assert isinstance(r.extensions["network_stream"], http_backend.AsyncioStream)


async def test_a_proxy_in_the_environment_goes_through_httpx_own_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")  # nothing listens there
    async with Server(keep_alive) as s:
        async with http_pool.pooled_client(max_connections=1, max_keepalive=1) as c:
            with pytest.raises(httpx.ConnectError):  # the server is up: the proxy is not
                await c.get(s.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with http_pool.pooled_client(max_connections=1, max_keepalive=1) as c:
            assert (await c.get(s.url)).text == "ok"


async def test_a_full_pool_queues_and_trims_to_max_keepalive_as_httpcore_does() -> None:
    async with Server(keep_alive) as s:
        seen = []
        t = _transport(max_connections=3, max_keepalive_connections=1)
        for c in (
            httpx.AsyncClient(transport=t),
            httpx.AsyncClient(limits=httpx.Limits(max_connections=3, max_keepalive_connections=1)),
        ):
            async with c:
                before = s.connections
                rs = await asyncio.gather(*(c.get(s.url) for _ in range(20)))
                assert all(r.text == "ok" for r in rs)
                seen.append(s.connections - before)
        assert seen[0] <= 3 and len(t.connections) <= 1
        assert seen[0] <= seen[1]  # no more connections opened than httpcore's own pool


async def test_a_full_pool_waits_for_a_connection_up_to_the_pool_timeout() -> None:
    async with (
        Server(keep_alive) as s,
        httpx.AsyncClient(transport=_transport(max_connections=1)) as c,
    ):
        async with c.stream("GET", s.url) as held:
            with pytest.raises(httpx.PoolTimeout):
                await c.get(s.url, timeout=httpx.Timeout(5, pool=0.05))
            waiting = asyncio.create_task(c.get(s.url))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            await held.aread()
        assert (await asyncio.wait_for(waiting, 5)).text == "ok"
        assert s.connections == 1


async def test_keep_alive_reuses_one_connection(client: httpx.AsyncClient) -> None:
    async with Server(keep_alive) as s:
        for _ in range(5):
            r = await client.post(s.url, content=b"x" * 100)
            assert r.status_code == 200 and r.text == "ok"
        assert s.connections == 1


async def test_concurrent_requests_share_the_pool(client: httpx.AsyncClient) -> None:
    async with Server(keep_alive) as s:
        rs = await asyncio.gather(*(client.get(s.url) for _ in range(30)))
        assert all(r.text == "ok" for r in rs)
        assert s.connections <= 10


async def test_an_idle_connection_the_server_closed_is_replaced(client: httpx.AsyncClient) -> None:
    async with Server(one_then_close) as s:
        for _ in range(3):
            assert (await client.get(s.url)).text == "ok"
            await asyncio.sleep(0.05)  # the FIN reaches the client's event loop
        assert s.connections == 3


async def test_a_connection_whose_keep_alive_ran_out_gets_no_request() -> None:
    # Between the pool's full passes the connection a request gets is checked itself.
    pool = _transport(max_connections=10, max_keepalive_connections=10, keepalive_expiry=0.05)
    async with Server(keep_alive) as s, httpx.AsyncClient(transport=pool) as c:
        assert (await c.get(s.url)).text == "ok"
        first = pool.connections[0]
        await asyncio.sleep(0.1)
        pool._swept_at = time.monotonic() + 3600  # no full pass now
        assert (await c.get(s.url)).text == "ok"
        assert s.connections == 2 and first not in pool.connections


async def test_a_full_pool_gives_a_dropped_connections_place_to_a_new_one() -> None:
    async with (
        Server(one_then_close) as s,
        httpx.AsyncClient(
            transport=_transport(max_connections=1, max_keepalive_connections=1)
        ) as c,
    ):
        pool = c._transport  # type: ignore[attr-defined]
        for _ in range(3):
            pool._swept_at = float("inf")  # only the full pool's own pass may run
            assert (await c.get(s.url)).text == "ok"
            await asyncio.sleep(0.05)  # the FIN reaches the client's event loop
        assert s.connections == 3 and len(pool.connections) <= 1


async def test_connect_refused_is_httpx_connect_error(client: httpx.AsyncClient) -> None:
    async with Server(keep_alive) as s:
        url = s.url
    await asyncio.sleep(0)
    with pytest.raises(httpx.ConnectError):
        await client.get(url)


async def test_a_silent_server_is_a_read_timeout(client: httpx.AsyncClient) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        await asyncio.sleep(5)

    async with Server(silent) as s:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(s.url, timeout=httpx.Timeout(5, read=0.2))


async def _raw_stream(s: Server) -> http_backend.AsyncioStream:
    port = int(s.url.rsplit(":", 1)[1].strip("/"))
    stream = await http_backend.AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
    assert isinstance(stream, http_backend.AsyncioStream)
    return stream


async def test_each_read_times_out_from_its_own_start_on_the_one_lazy_timer() -> None:
    """The per-connection timer armed by an early read must neither cut a later read short
    nor let it wait past its own timeout; buffered bytes need no timer at all."""
    go = asyncio.Event()

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"a")
        await writer.drain()
        await go.wait()
        writer.write(b"bc")
        await writer.drain()
        await asyncio.sleep(5)

    async with Server(trickle) as s:
        stream = await _raw_stream(s)
        try:
            assert await stream.read(1, timeout=0.5) == b"a"
            loop = asyncio.get_running_loop()
            loop.call_later(0.35, go.set)  # past the first read's deadline, before the second's
            await asyncio.sleep(0.3)
            assert await stream.read(1, timeout=0.5) == b"b"
            assert await stream.read(10, timeout=0.01) == b"c"  # buffered: returned at once
            t0 = time.monotonic()
            with pytest.raises(httpcore.ReadTimeout):
                await stream.read(10, timeout=0.3)
            assert 0.25 <= time.monotonic() - t0 < 2.0
        finally:
            await stream.aclose()


async def test_a_cancel_during_a_timed_read_stays_a_cancel() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    async with Server(silent) as s:
        stream = await _raw_stream(s)
        try:
            task = asyncio.create_task(stream.read(10, timeout=0.2))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The timer armed by the cancelled read finds no read waiting and stops; the
            # next read still times out on its own deadline.
            with pytest.raises(httpcore.ReadTimeout):
                await stream.read(10, timeout=0.3)
        finally:
            await stream.aclose()


async def test_a_connection_cut_mid_body_is_a_transport_error(client: httpx.AsyncClient) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.transport.abort()

    async with Server(cut) as s:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await client.get(s.url)


async def test_streamed_body_arrives_in_pieces(client: httpx.AsyncClient) -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in (b"data: 1\n\n", b"data: 2\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with Server(chunked) as s, client.stream("GET", s.url) as r:
        body = b"".join([c async for c in r.aiter_bytes()])
    assert body == b"data: 1\n\ndata: 2\n\n"


async def test_the_stream_maps_write_errors() -> None:
    async with Server(keep_alive) as s:
        port = int(s.url.rsplit(":", 1)[1].strip("/"))
        stream = await http_backend.AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        assert stream.get_extra_info("is_readable") is False
        assert stream.get_extra_info("server_addr")[1] == port
        await stream.aclose()
        assert stream.get_extra_info("is_readable") is True
        with pytest.raises(httpcore.WriteError):
            await stream.write(b"GET / HTTP/1.1\r\n\r\n", timeout=1)


async def test_a_request_goes_out_whole_before_the_response_is_read() -> None:
    # Head and body are held and sent together when the response is read; a body past
    # the hold limit is sent as it is written (it must not wait in memory for the read).
    got: list[bytes] = []
    second = asyncio.Event()

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            got.append(await _read_request(reader))
            if len(got) == 2:
                second.set()
            writer.write(OK)
            await writer.drain()

    async with Server(record) as s:
        port = int(s.url.rsplit(":", 1)[1].strip("/"))
        stream = await http_backend.AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        await stream.write(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n", timeout=1)
        await stream.write(b"body", timeout=1)
        assert stream._held_bytes == 42  # type: ignore[attr-defined]
        assert await stream.read(2, timeout=5) == OK[:2]
        assert stream._held_bytes == 0  # type: ignore[attr-defined]
        big = b"x" * (http_backend._HOLD_BYTES + 1)
        await stream.write(b"POST / HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(big), timeout=1)
        await stream.write(big, timeout=5)
        assert stream._held_bytes == 0  # type: ignore[attr-defined]
        # The server gets the whole body although the client has not read: it was not held.
        await asyncio.wait_for(second.wait(), 5)
        assert got[1].endswith(big)
        await stream.aclose()
    assert got[0].endswith(b"\r\n\r\nbody")


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))


async def test_tls(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ctx, client_ctx = tls
    async with (
        Server(keep_alive, server_ctx) as s,
        http_pool.pooled_client(max_connections=4, max_keepalive=4, verify=client_ctx) as c,
    ):
        for _ in range(3):
            r = await c.get(s.url)
            assert r.text == "ok"
            assert r.extensions["network_stream"].get_extra_info("ssl_object") is not None
        assert s.connections == 1


async def test_tls_refuses_an_unknown_certificate(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_ctx, _ = tls
    async with (
        Server(keep_alive, server_ctx) as s,
        http_pool.pooled_client(max_connections=4, max_keepalive=4) as c,
    ):
        with pytest.raises(httpx.ConnectError):
            await c.get(s.url)

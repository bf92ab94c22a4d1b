"""A real `agentd api` process bounds what a client can make it hold (issue 42).

Black box: raw sockets against `agentd api` started from the CLI. A request head over the
limits is answered 431/414 at once and its connection closed, unread; the process's memory
stays put and /healthz keeps answering while it happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

from ._procs_scale import Fleet, Proc, fleet, free_port, http_ok, poll

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(120)]

MB = 1024 * 1024


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
async def api(tmp_path: Path, database_url: str) -> AsyncIterator[tuple[Fleet, Proc, str]]:
    port = free_port()
    with fleet(tmp_path, database_url, AGENTD_PORT=str(port)) as f:
        proc = f.start("api", "api")
        base = f"http://127.0.0.1:{port}"
        await poll(lambda: http_ok(f"{base}/healthz"), within=30, what="api /healthz")
        yield f, proc, base


async def _send_head(port: int, head: bytes, filler: int) -> bytes:
    """Send `head`, then up to `filler` bytes of one header's value, reading meanwhile;
    return what the server answered (b"" when it only hung up)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = asyncio.ensure_future(reader.read(4096))
    try:
        writer.write(head)
        chunk = b"a" * MB
        sent = 0
        while sent < filler and not answer.done():
            writer.write(chunk)
            try:
                await writer.drain()
            except (ConnectionError, OSError):
                break
            sent += len(chunk)
        return await asyncio.wait_for(answer, 10)
    except (ConnectionError, OSError):
        return answer.result() if answer.done() and not answer.exception() else b""
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


async def test_a_huge_header_gets_431_at_once_and_memory_stays_put(
    api: tuple[Fleet, Proc, str],
) -> None:
    _, proc, base = api
    port = _port(base)
    before = rss_mb(proc.pid)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
    started = time.monotonic()

    async def healthz_meanwhile() -> float:
        slowest = 0.0
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            for _ in range(20):
                t = time.monotonic()
                assert (await http.get("/healthz")).status_code == 200
                slowest = max(slowest, time.monotonic() - t)
        return slowest

    answers, slowest = await asyncio.gather(
        asyncio.gather(*(_send_head(port, head, 150 * MB) for _ in range(4))),
        healthz_meanwhile(),
    )
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert time.monotonic() - started < 20  # not after 150 MB each: the head was cut short
    assert slowest < 2.0, f"/healthz took {slowest:.1f}s while the headers came in"
    assert rss_mb(proc.pid) - before < 40, (before, rss_mb(proc.pid))
    # The process still serves.
    assert await http_ok(f"{base}/healthz")


async def test_too_many_headers_431_a_long_url_414_and_a_normal_head_passes(
    api: tuple[Fleet, Proc, str],
) -> None:
    _, _, base = api
    port = _port(base)
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(101))
    answer = await _send_head(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n", 0)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    long_url = b"/healthz?q=" + b"a" * 9000
    answer = await _send_head(port, b"GET " + long_url + b" HTTP/1.1\r\nHost: x\r\n\r\n", 0)
    assert answer.startswith(b"HTTP/1.1 414 "), answer[:200]
    # A URL of unbounded length sent slowly is cut at the limit too, not buffered.
    answer = await _send_head(port, b"GET /healthz?q=", 50 * MB)
    assert answer.startswith(b"HTTP/1.1 414 "), answer[:200]
    # Under the limits (a 20 kB header, 90 fields) is served as before, on a kept-alive
    # connection whose next request counts its own head afresh.
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        headers = {f"x-h{i}": "v" for i in range(90)} | {"x-big": "a" * 20_000}
        for _ in range(3):
            assert (await http.get("/healthz", headers=headers)).status_code == 200


async def test_limits_are_settings(tmp_path: Path, database_url: str) -> None:
    port = free_port()
    with fleet(
        tmp_path,
        database_url,
        AGENTD_PORT=str(port),
        AGENTD_MAX_HEADER_BYTES="4096",
        AGENTD_MAX_HEADERS="10",
        AGENTD_MAX_URL_BYTES="512",
    ) as f:
        f.start("api", "api")
        base = f"http://127.0.0.1:{port}"
        await poll(lambda: http_ok(f"{base}/healthz"), within=30, what="api /healthz")
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            assert (await http.get("/healthz", headers={"x-a": "a" * 3000})).status_code == 200
            assert (await http.get("/healthz", headers={"x-a": "a" * 5000})).status_code == 431
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            many = {f"x-{i}": "v" for i in range(11)}
            assert (await http.get("/healthz", headers=many)).status_code == 431
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            assert (await http.get("/healthz?" + "a" * 600)).status_code == 414


async def test_idle_streams_do_not_starve_the_worker_or_the_api(
    tmp_path: Path, database_url: str
) -> None:
    """`agentd up` (API and worker in one process): a read token's streams, as many as it may
    hold, idle on a loop waiting for approval (one more is 429), and as many idle fleet-feed
    streams (GET /v1/events) on the operator token. A loop still runs its turn
    promptly, GETs answer promptly, and the waiting loop, approved, finishes under all its
    watchers, each of which sees it end."""
    port = free_port()
    n = 100  # AGENTD_MAX_STREAMS_PER_TOKEN's default
    async with FakeLLM() as fake:
        fake.add(
            Rule(
                match=lambda last: last.role == "user" and "refund" in last.text,
                reply=Reply(tool_calls=[ToolCall("refund", {"amount": 1})]),
            )
        )
        fake.add(Rule(reply=Reply(content="done. " * 40, chunk_size=4)))
        with fleet(tmp_path, database_url, AGENTD_PORT=str(port), AGENTD_READ_TOKENS="reader") as f:
            f.start("up", "up")
            base = f"http://127.0.0.1:{port}"
            await poll(lambda: http_ok(f"{base}/healthz"), within=30, what="up /healthz")
            op = httpx.AsyncClient(
                base_url=base, headers={"Authorization": f"Bearer {f.env['AGENTD_API_TOKEN']}"}
            )
            reader = httpx.AsyncClient(
                base_url=base,
                headers={"Authorization": "Bearer reader"},
                timeout=60,
                limits=httpx.Limits(max_connections=n + 10),
            )
            feeder = httpx.AsyncClient(
                base_url=base,
                headers=op.headers,
                timeout=60,
                limits=httpx.Limits(max_connections=n + 10),
            )
            async with op, reader, feeder:
                state = {"llm": fake.base_url}
                r = await op.post(
                    "/v1/loops", json={"agent": "calc", "message": "refund", "state": state}
                )
                waiting = r.json()["id"]

                async def is_waiting() -> bool:
                    return (await op.get(f"/v1/loops/{waiting}")).json()["status"] == "waiting"

                await poll(is_waiting, within=30, what="the loop waits for approval")
                opened = 0
                ended: list[str] = []

                async def watch() -> None:
                    nonlocal opened
                    async with reader.stream("GET", f"/v1/loops/{waiting}/stream") as s:
                        assert s.status_code == 200
                        opened += 1
                        async for line in s.aiter_lines():
                            if line.startswith('data: {"status": "completed"'):
                                ended.append(line)

                watchers = [asyncio.create_task(watch()) for _ in range(n)]

                async def all_open() -> bool:
                    return opened == n

                await poll(all_open, within=60, what=f"{n} streams open")
                r = await reader.get(f"/v1/loops/{waiting}/stream")
                assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
                # And as many idle fleet-feed streams on the operator token.
                feed_open = 0

                async def tail_feed() -> None:
                    nonlocal feed_open
                    headers = {"Accept": "text/event-stream"}
                    async with feeder.stream("GET", "/v1/events", headers=headers) as s:
                        assert s.status_code == 200
                        feed_open += 1
                        async for _ in s.aiter_lines():
                            pass

                feeds = [asyncio.create_task(tail_feed()) for _ in range(n)]

                async def feeds_open() -> bool:
                    return feed_open == n

                await poll(feeds_open, within=60, what=f"{n} feed streams open")

                # A one-turn loop runs while the streams idle; GETs stay prompt.
                started = time.monotonic()
                r = await op.post(
                    "/v1/loops", json={"agent": "calc", "message": "hi", "state": state}
                )
                other = r.json()["id"]
                slowest = 0.0

                async def completed(lid: str) -> bool:
                    nonlocal slowest
                    t = time.monotonic()
                    row = (await op.get(f"/v1/loops/{lid}")).json()
                    slowest = max(slowest, time.monotonic() - t)
                    if row["status"] in ("failed", "paused", "stopped"):
                        raise AssertionError(f"loop {lid} ended {row}")
                    return row["status"] == "completed"

                await poll(lambda: completed(other), within=15, what="the one-turn loop")
                assert time.monotonic() - started < 15

                # The watched loop runs its turn under all its watchers; each sees the end.
                calls = (await op.get(f"/v1/loops/{waiting}/approvals")).json()["items"]
                r = await op.post(f"/v1/tool-calls/{calls[0]['id']}/approve", json={})
                assert r.status_code == 200, r.text
                try:
                    await poll(lambda: completed(waiting), within=30, what="the watched loop")
                except AssertionError:
                    row = (await op.get(f"/v1/loops/{waiting}")).json()
                    msgs = (await op.get(f"/v1/loops/{waiting}/messages")).json()
                    raise AssertionError(f"{row}\n{msgs}") from None
                await asyncio.wait_for(asyncio.gather(*watchers), 30)
                assert len(ended) == n
                for task in feeds:
                    task.cancel()
                assert slowest < 3.0, f"a GET took {slowest:.1f}s"

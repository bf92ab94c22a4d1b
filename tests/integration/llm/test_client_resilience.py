"""Retries, timeouts, cancellation and redaction of LLMClient against FakeLLM."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import socket
import time
from collections.abc import Callable

import pytest
import structlog

from agentd.errors import (
    LLMIdleTimeout,
    LLMProtocolError,
    LLMStatusError,
    LLMTimeout,
    LLMTransportError,
)
from agentd.llm.client import LLMClient, RetryPolicy
from agentd.llm.types import LLMRequest, Message, Provider, StreamDelta
from agentd.testing.fake_llm import FakeLLM, Reply, Rule


def req(
    fake: FakeLLM | str,
    *,
    stream: bool = True,
    read_timeout: float | None = None,
    max_duration: float | None = None,
    token: str | None = "tok",
) -> LLMRequest:
    base = fake if isinstance(fake, str) else fake.base_url
    return LLMRequest(
        provider=Provider(
            base_url=base,
            model="m",
            api_token=token,
            read_timeout=read_timeout,
            connect_timeout=2.0,
        ),
        messages=[Message("user", "hi")],
        stream=stream,
        max_duration=max_duration,
    )


async def eventually(cond: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [429, 503])
async def test_retryable_status_is_resent_then_succeeds(
    client: LLMClient, fake: FakeLLM, status: int, stream: bool
) -> None:
    fake.add(Rule(reply=Reply(status=status), times=2))
    r = await client.complete(req(fake, stream=stream))
    assert r.content == "ok" and len(fake.requests) == 3
    assert [e.status for e in r.exchanges] == [status, status, 200]
    assert [e.retry_delay for e in r.exchanges] == [0.01, 0.02, None]
    assert r.duration == r.exchanges[-1].duration


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_deterministic_status_is_never_retried(
    client: LLMClient, fake: FakeLLM, status: int
) -> None:
    fake.add(Rule(reply=Reply(status=status, error_body='{"error": "no"}')))
    with pytest.raises(LLMStatusError) as info:
        await client.complete(req(fake))
    assert info.value.status_code == status and info.value.body == '{"error": "no"}'
    assert len(fake.requests) == 1 and len(info.value.exchanges) == 1  # type: ignore[attr-defined]


async def test_exhausted_retries_raise_the_last_status_error(
    client: LLMClient, fake: FakeLLM
) -> None:
    fake.add(Rule(reply=Reply(status=503, retry_after="0", error_body="busy")))
    with pytest.raises(LLMStatusError) as info:
        await client.complete(req(fake))
    err = info.value
    assert (err.status_code, err.retry_after, err.body) == (503, 0.0, "busy")
    exchanges = err.exchanges  # type: ignore[attr-defined]
    assert [e.attempt for e in exchanges] == [1, 2, 3]
    assert [e.retry_delay for e in exchanges] == [0.0, 0.0, None]
    assert all(e.response_body == "busy" and e.error for e in exchanges)


async def test_retry_after_delta_seconds_is_honoured(fake: FakeLLM) -> None:
    client = LLMClient(policy=RetryPolicy(retries=1, base_delay=0.01))
    fake.add(Rule(reply=Reply(status=429, retry_after="1"), times=1))
    started = time.monotonic()
    r = await client.complete(req(fake))
    assert time.monotonic() - started >= 1.0
    assert r.exchanges[0].retry_delay == 1.0
    await client.aclose()


async def test_retry_after_http_date_is_honoured(fake: FakeLLM) -> None:
    client = LLMClient(policy=RetryPolicy(retries=1, base_delay=0.01))
    when = email.utils.formatdate(time.time() + 2, usegmt=True)
    fake.add(Rule(reply=Reply(status=503, retry_after=when), times=1))
    r = await client.complete(req(fake))
    assert r.exchanges[0].retry_delay is not None and 0.5 < r.exchanges[0].retry_delay <= 2.0
    await client.aclose()


async def test_retry_after_is_capped_by_max_delay(fake: FakeLLM) -> None:
    client = LLMClient(policy=RetryPolicy(retries=1, base_delay=0.01, max_delay=0.05))
    fake.add(Rule(reply=Reply(status=429, retry_after="3600"), times=1))
    r = await client.complete(req(fake))
    assert r.exchanges[0].retry_delay == 0.05
    await client.aclose()


async def test_cancelling_during_backoff_returns_immediately(fake: FakeLLM) -> None:
    client = LLMClient(policy=RetryPolicy(retries=2, base_delay=0.01, max_delay=60.0))
    fake.add(Rule(reply=Reply(status=429, retry_after="30")))
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(client.complete(req(fake)))
        await eventually(lambda: any(e["event"] == "llm.retry" for e in logs))
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert time.monotonic() - started < 1.0
    assert len(fake.requests) == 1
    await client.aclose()


async def test_connection_never_established_is_retried(client: LLMClient) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(LLMTransportError) as info:
        await client.complete(req(f"http://127.0.0.1:{port}"))
    assert info.value.connected is False
    assert len(info.value.exchanges) == 3  # type: ignore[attr-defined]


async def test_stalled_stream_times_out_and_is_not_retried(
    client: LLMClient, fake: FakeLLM
) -> None:
    fake.add(Rule(reply=Reply(content="x" * 50, chunk_size=5, stall_after_chunks=3)))
    started = time.monotonic()
    with pytest.raises(LLMTimeout) as info:
        await client.complete(req(fake, read_timeout=0.5))
    assert 0.5 <= time.monotonic() - started < 3
    assert len(fake.requests) == 1 and len(info.value.exchanges) == 1  # type: ignore[attr-defined]
    await fake.wait_for_disconnects(1)  # the client hung up on the stalled stream


async def test_trickling_stream_trips_idle_timeout_and_is_resent(fake: FakeLLM) -> None:
    """A model sending a byte every 0.1 s keeps every read busy (read_timeout never trips),
    but completes no event: idle_timeout fails the attempt; nothing was handed over, so
    it is re-sent under the retry policy and the second answer gets through."""
    fake.add(Rule(reply=Reply(content="slow", trickle_after_chunks=0, trickle_delay=0.1), times=1))
    c = LLMClient(policy=RetryPolicy(retries=2, base_delay=0.01), default_idle_timeout=0.6)
    try:
        seen: list[StreamDelta] = []

        async def on_delta(d: StreamDelta) -> None:
            seen.append(d)

        started = time.monotonic()
        r = await c.complete(req(fake, read_timeout=5.0), on_delta=on_delta)
    finally:
        await c.aclose()
    assert r.content == "ok" and "".join(d.content for d in seen) == "ok"
    assert len(fake.requests) == 2 and 0.6 <= time.monotonic() - started < 4
    first = r.exchanges[0]
    assert first.error is not None and "LLMIdleTimeout" in first.error
    assert first.retry_delay == 0.01
    await fake.wait_for_disconnects(1)  # the trickling stream was hung up on


async def test_idle_timeout_after_tokens_handed_over_fails_without_resend(fake: FakeLLM) -> None:
    """Once deltas were handed over a re-send would repeat them: the attempt fails with
    LLMIdleTimeout (per provider idle_timeout) instead of running until max_duration."""
    fake.add(
        Rule(reply=Reply(content="x" * 40, chunk_size=5, trickle_after_chunks=3, trickle_delay=0.1))
    )
    c = LLMClient(policy=RetryPolicy(retries=2, base_delay=0.01), default_idle_timeout=60)
    seen: list[StreamDelta] = []

    async def on_delta(d: StreamDelta) -> None:
        seen.append(d)

    request = req(fake, read_timeout=5.0)
    request = LLMRequest(
        provider=dataclasses.replace(request.provider, idle_timeout=0.5),
        messages=request.messages,
        stream=True,
    )
    started = time.monotonic()
    try:
        with pytest.raises(LLMIdleTimeout) as info:
            await c.complete(request, on_delta=on_delta)
    finally:
        await c.aclose()
    assert 0.5 <= time.monotonic() - started < 3
    assert seen and len(fake.requests) == 1
    assert len(info.value.exchanges) == 1  # type: ignore[attr-defined]
    assert isinstance(info.value, LLMTimeout)  # an LLMTimeout, as callers catch it


async def test_steady_events_never_trip_idle_timeout(fake: FakeLLM) -> None:
    fake.add(Rule(reply=Reply(content="abcdefgh", chunk_size=1, chunk_delay=0.2)))
    c = LLMClient(policy=RetryPolicy(retries=0), default_idle_timeout=0.5)
    try:
        r = await c.complete(req(fake, read_timeout=5.0))
    finally:
        await c.aclose()
    assert r.content == "abcdefgh" and len(fake.requests) == 1


async def test_silent_prefill_times_out(client: LLMClient, fake: FakeLLM) -> None:
    fake.add(Rule(reply=Reply(delay_before_first_byte=10)))
    with pytest.raises(LLMTimeout):
        await client.complete(req(fake, stream=False, read_timeout=0.3))
    assert len(fake.requests) == 1


async def test_slow_but_steady_stream_succeeds(client: LLMClient, fake: FakeLLM) -> None:
    fake.add(Rule(reply=Reply(content="abcdefghij", chunk_size=1, chunk_delay=0.3)))
    started = time.monotonic()
    r = await client.complete(req(fake, read_timeout=1.0))
    assert r.content == "abcdefghij" and time.monotonic() - started >= 3.0


async def test_max_duration_caps_the_whole_call(client: LLMClient, fake: FakeLLM) -> None:
    fake.add(Rule(reply=Reply(content="abcdefghij", chunk_size=1, chunk_delay=0.2)))
    with pytest.raises(LLMTimeout) as info:
        await client.complete(req(fake, read_timeout=5, max_duration=0.5))
    assert len(info.value.exchanges) == 1  # type: ignore[attr-defined]


async def test_dropped_connection_mid_stream_is_not_retried(
    client: LLMClient, fake: FakeLLM
) -> None:
    fake.add(Rule(reply=Reply(content="x" * 40, chunk_size=4, drop_after_chunks=3)))
    with pytest.raises(LLMTransportError) as info:
        await client.complete(req(fake))
    assert info.value.connected is True and len(fake.requests) == 1


async def test_error_event_before_any_delta_is_retried(client: LLMClient, fake: FakeLLM) -> None:
    fake.add(Rule(reply=Reply(content="hi", error_after_chunks=1), times=1))
    seen: list[StreamDelta] = []

    async def on_delta(d: StreamDelta) -> None:
        seen.append(d)

    r = await client.complete(req(fake), dialect="anthropic", on_delta=on_delta)
    assert r.content == "ok" and len(fake.requests) == 2
    assert "".join(d.content for d in seen) == "ok"


async def test_error_after_content_was_handed_over_is_not_retried(
    client: LLMClient, fake: FakeLLM
) -> None:
    fake.add(Rule(reply=Reply(content="partial answer", chunk_size=4, error_after_chunks=4)))
    seen: list[StreamDelta] = []

    async def on_delta(d: StreamDelta) -> None:
        seen.append(d)

    with pytest.raises(LLMStatusError) as info:
        await client.complete(req(fake), dialect="anthropic", on_delta=on_delta)
    assert info.value.status_code == 429 and seen and len(fake.requests) == 1


@pytest.mark.parametrize("dialect", ["open_ai", "anthropic", "gemini"])
async def test_truncated_stream_is_a_failed_turn_not_a_short_answer(
    client: LLMClient, fake: FakeLLM, dialect: str
) -> None:
    fake.add(Rule(reply=Reply(content="abcdefghij", chunk_size=1, truncate_after_chunks=4)))
    with pytest.raises(LLMProtocolError):
        await client.complete(req(fake), dialect=dialect)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("dialect", ["open_ai", "anthropic", "gemini"])
async def test_secrets_never_appear_in_exchanges(
    client: LLMClient, fake: FakeLLM, dialect: str
) -> None:
    canary, url_canary = "CANARY-7f3a9c", "URLCANARY-55ab"
    fake.add(Rule(reply=Reply(status=503, error_body=f"bad key {canary}"), times=1))
    r = await client.complete(
        req(f"{fake.base_url}/?key={url_canary}", token=canary), dialect=dialect
    )
    assert len(r.exchanges) == 2
    dumped = repr(r.exchanges)
    assert canary not in dumped and url_canary not in dumped
    # the real request did carry them
    assert canary in str(fake.requests[0].headers) and url_canary in fake.requests[0].path


@pytest.mark.parametrize("coding", ["gzip", "identity", None])
async def test_a_streamed_answer_in_any_content_coding_is_decoded(coding: str | None) -> None:
    """Without a content coding the client reads the raw body; with one, httpx decodes it."""
    import gzip
    import json

    events = [
        {"choices": [{"index": 0, "delta": {"content": part}}]} for part in ("Hel", "lo", "!")
    ]
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    raw += b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
    raw += b"data: [DONE]\n\n"
    body = gzip.compress(raw) if coding == "gzip" else raw

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        coding_line = f"Content-Encoding: {coding}\r\n".encode() if coding else b""
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            + coding_line
            + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
            + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    seen: list[str] = []

    async def on_delta(d: StreamDelta) -> None:
        seen.append(d.content)

    client = LLMClient()
    try:
        r = await client.complete(req(f"http://127.0.0.1:{port}"), on_delta=on_delta)
    finally:
        await client.aclose()
        server.close()
    assert r.content == "Hello!" and seen == ["Hel", "lo", "!"]

"""LLMClient: one HTTP call to a model, with retries, streaming and a redacted wire log.

`read_timeout` is an inactivity timeout (httpx's read timeout is per socket read, so every
chunk resets it); `idle_timeout` bounds a streamed answer's silence in whole events (a
model trickling bytes that never complete an event trips it, though every read brings
something); `request.max_duration` caps the whole call, retries and backoff included.
Backoff is a plain `asyncio.sleep` here, so cancelling the task (pause/stop) ends it at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import structlog

from agentd import redact
from agentd.errors import ConfigError, LLMError, LLMIdleTimeout, LLMStatusError, LLMTimeout
from agentd.llm import body, http_pool, merge, retry, sse, transport
from agentd.llm.dialects import get_dialect
from agentd.llm.dialects.base import Dialect, base_url_problem, load_json
from agentd.llm.types import LLMRequest, LLMResponse, OnDelta, StreamDelta, WireExchange

log = structlog.get_logger("agentd.llm")

RetryPolicy = retry.RetryPolicy
# Told of a 429/503 carrying Retry-After before any re-send; True: raise it instead of
# sleeping here (the engine defers the turn fleet-wide rather than hold a worker slot).
OnThrottled = Callable[[LLMStatusError], Awaitable[bool]]
THROTTLE_STATUSES = frozenset({429, 503})
MAX_LOGGED_BODY = 64 * 1024  # response bytes kept per exchange


@dataclass
class _Call:
    """State shared by the attempts of one `complete` call."""

    dialect: Dialect
    url: str
    headers: dict[str, str]
    payload: dict[str, Any]
    stream: bool
    timeout: httpx.Timeout
    idle_timeout: float
    on_delta: OnDelta | None
    secrets: list[str]
    body: body.Body  # encoded once: the exact bytes every attempt sends
    exchanges: list[WireExchange] = field(default_factory=list)
    handed_over: bool = False  # latched at the first delta given to on_delta
    throttled: OnThrottled | None = None


class _Capture:
    """Keeps the first MAX_LOGGED_BODY bytes of a body for the wire log."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.truncated = False
        self.charset: str | None = None  # the response's declared charset, if any

    def add(self, chunk: bytes) -> None:
        room = MAX_LOGGED_BODY - self.size
        if room <= 0:
            self.truncated = self.truncated or bool(chunk)
            return
        self.parts.append(chunk[:room])
        self.size += min(room, len(chunk))
        self.truncated = self.truncated or len(chunk) > room

    def text(self) -> str:
        data = b"".join(self.parts)
        try:  # a declared charset (a UTF-16 error page) is read as such, so redaction sees it
            body = data.decode(self.charset or "utf-8", errors="replace")
        except LookupError:
            body = data.decode("utf-8", errors="replace")
        return body + ("\n…[truncated]" if self.truncated else "")


def _body(r: httpx.Response) -> AsyncIterator[bytes]:
    """The response body as it arrives: without a content coding there is nothing to decode,
    and the raw iterator spares every chunk httpx's decoder and chunker layers."""
    coding = r.headers.get("content-encoding", "identity").strip().lower()
    return r.aiter_raw() if coding in ("", "identity") else r.aiter_bytes()


def _mask(value: Any, secrets: list[str]) -> Any:
    """Mask this call's literal secrets, then every pattern, anywhere in a JSON-like value
    (walked: its texts are short, or were redacted a moment ago)."""
    return redact.scrub(value, also=secrets, whole=False)


def _literal_masked(body: str, secrets: list[str]) -> str:
    """A response body with this call's literal keys replaced, nothing more. The whole
    masking (patterns, encoded forms) runs once, where the body is stored (store/events.py
    scrubs every wire log), and the key is in the process's known secrets by then: masking
    a long streamed body here too cost as much again, per turn."""
    for secret in secrets:
        body = body.replace(secret, redact.MASK)
    return body


class LLMClient:
    def __init__(
        self,
        *,
        policy: RetryPolicy | None = None,
        default_read_timeout: float = 600.0,
        default_idle_timeout: float = 60.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.policy = policy or RetryPolicy()
        self.default_read_timeout = default_read_timeout
        self.default_idle_timeout = default_idle_timeout
        self._owns_http = http is None
        # One pool per process; hundreds of turns may stream at once.
        self._http = http or http_pool.pooled_client(
            max_connections=1000,
            max_keepalive=200,
            timeout=httpx.Timeout(default_read_timeout, connect=10.0),
        )

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def complete(
        self,
        request: LLMRequest,
        *,
        dialect: str = "open_ai",
        on_delta: OnDelta | None = None,
        throttled: OnThrottled | None = None,
    ) -> LLMResponse:
        """Send `request`; every LLMError raised carries `.exchanges` (all attempts so far)."""
        d = get_dialect(dialect)
        provider = request.provider
        problem = base_url_problem(dialect, provider.base_url)
        if problem is not None:  # a base_url computed per loop; static ones fail at load
            raise ConfigError(problem)
        rendered = d.render(request)
        payload = merge.deep_merge(rendered.payload, request.llm_params)
        stream = d.is_stream(request, payload)
        read_timeout = provider.read_timeout or self.default_read_timeout
        secrets = [s for s in (provider.api_token,) if s]
        redact.current().remember(*secrets)  # echoes masked wherever stored, in any encoding
        call = _Call(
            dialect=d,
            url=d.url(provider, stream=stream),
            headers={"content-type": "application/json", **d.headers(provider), **provider.headers},
            payload=payload,
            stream=stream,
            timeout=httpx.Timeout(
                connect=provider.connect_timeout,
                read=read_timeout,
                write=read_timeout,
                pool=read_timeout,
            ),
            idle_timeout=provider.idle_timeout or self.default_idle_timeout,
            on_delta=on_delta,
            secrets=secrets,
            body=body.encode(payload, rendered.elements),
            throttled=throttled,
        )
        deadline = asyncio.timeout(request.max_duration)
        try:
            async with deadline:
                response = await self._attempts(call)
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            err = LLMTimeout(f"LLM call exceeded max_duration of {request.max_duration}s")
            err.exchanges = call.exchanges  # type: ignore[attr-defined]
            raise err from exc
        except LLMError as err:
            err.exchanges = call.exchanges  # type: ignore[attr-defined]
            raise
        response.metadata["reasoning_carried"] = rendered.reasoning_carried
        response.exchanges = call.exchanges
        return response

    async def _attempts(self, call: _Call) -> LLMResponse:
        attempt = 0
        while True:
            attempt += 1
            exchange = WireExchange(
                attempt=attempt,
                method="POST",
                url=_mask(call.url, call.secrets),
                request_headers=redact.headers(call.headers, also=call.secrets),
                request_body=None,  # redacted piece by piece when logged (pipeline/wire.py)
                request_wire=call.body,
                request_secrets=tuple(call.secrets),
            )
            call.exchanges.append(exchange)
            started = time.monotonic()
            try:
                response = await self._send(call, exchange, started)
            except LLMError as err:
                exchange.duration = time.monotonic() - started
                exchange.error = _mask(f"{type(err).__name__}: {err.message}", call.secrets)
                if (
                    call.throttled is not None
                    and isinstance(err, LLMStatusError)
                    and err.status_code in THROTTLE_STATUSES
                    and err.retry_after is not None
                    and await call.throttled(err)
                ):
                    raise
                decision = retry.decide(
                    attempt, exc=err, handed_over=call.handed_over, policy=self.policy
                )
                if decision is None:
                    raise
                exchange.retry_delay = decision.delay
                log.warning(
                    "llm.retry",
                    attempt=attempt,
                    delay=decision.delay,
                    reason=decision.reason,
                    url=exchange.url,
                )
                await asyncio.sleep(decision.delay)  # cancellation interrupts it at once
                continue
            except BaseException as exc:  # cancelled (pause/stop, max_duration)
                exchange.duration = time.monotonic() - started
                exchange.error = f"{type(exc).__name__}"
                raise
            exchange.duration = time.monotonic() - started
            response.duration = exchange.duration
            return response

    async def _send(self, call: _Call, exchange: WireExchange, started: float) -> LLMResponse:
        capture = _Capture()
        ttft: float | None = None
        try:
            with transport.map_transport_errors(call.url):
                async with self._http.stream(
                    "POST",
                    call.url,
                    content=call.body.data,
                    headers=call.headers,
                    timeout=call.timeout,
                ) as r:
                    exchange.status = r.status_code
                    capture.charset = r.charset_encoding
                    exchange.response_headers = redact.headers(r.headers, also=call.secrets)
                    if r.status_code >= 400:
                        async for chunk in r.aiter_bytes():
                            capture.add(chunk)
                        raise LLMStatusError(
                            f"LLM endpoint {transport.where(call.url)} answered HTTP "
                            f"{r.status_code}",
                            status_code=r.status_code,
                            retry_after=retry.parse_retry_after(r.headers.get("retry-after")),
                            body=_mask(capture.text(), call.secrets),
                        )
                    if not call.stream:
                        raw = await r.aread()
                        capture.add(raw)
                        response = call.dialect.parse(load_json(raw, "response body"))
                    else:
                        parser = call.dialect.stream_parser()
                        decoder = sse.SSEDecoder()
                        loop = asyncio.get_running_loop()
                        idle = asyncio.timeout(call.idle_timeout)
                        # Pushed back at most every `slack` seconds: a stream may then go
                        # idle_timeout - slack without an event before it is cut.
                        slack, moved = min(1.0, call.idle_timeout / 10), loop.time()
                        try:
                            async with idle:
                                async for chunk in _body(r):
                                    capture.add(chunk)
                                    events = decoder.feed(chunk)
                                    for event in events:
                                        deltas = parser.feed(event)
                                        if not deltas:
                                            continue
                                        if ttft is None:
                                            ttft = time.monotonic() - started
                                        await self._hand_over(call, deltas)
                                    if events:  # progress: a whole event, not a byte
                                        now = loop.time()
                                        if now - moved > slack:  # not per event: cheap
                                            moved = now
                                            idle.reschedule(now + call.idle_timeout)
                        except TimeoutError as exc:
                            if not idle.expired():
                                raise
                            raise LLMIdleTimeout(
                                f"the stream completed no event for {call.idle_timeout:g}s "
                                "(idle_timeout)"
                            ) from exc
                        for event in decoder.flush():
                            await self._hand_over(call, parser.feed(event))
                        response = parser.finish()
        finally:
            exchange.response_body = _literal_masked(capture.text(), call.secrets)
        response.ttft = ttft
        return response

    @staticmethod
    async def _hand_over(call: _Call, deltas: list[StreamDelta]) -> None:
        if call.on_delta is None:
            return
        for delta in deltas:
            call.handed_over = True  # from here on a re-send would duplicate content
            await call.on_delta(delta)

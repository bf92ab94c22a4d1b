"""A local webhook receiver for tests: verifies Standard Webhooks signatures, records every
arrival, dedupes on `webhook-id`, and can hold requests (to kill a sender mid-delivery) or
fail the first attempts of each message.

    async with WebhookReceiver(secret) as rx:
        ...  # point a [[webhooks]] url at rx.url
        await rx.wait_for_ids(3)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import standardwebhooks
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from agentd.testing.engine import eventually


def new_secret() -> str:
    """A Standard Webhooks secret: `whsec_` + base64 of 24 random bytes."""
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


@dataclass
class Arrival:
    webhook_id: str
    verified: bool
    headers: dict[str, str]
    body: dict[str, Any] | None
    tag: str = ""  # the receiver's `tag` when it arrived (a test's phase)
    #: the sender went away before its body was read (killed mid-request): never verified.
    cut: bool = False


@dataclass
class WebhookReceiver:
    secret: str
    host: str = "127.0.0.1"
    #: While set, requests wait (their senders see no answer) until it is cleared.
    hold: bool = False
    #: Answer 500 to the first `fail_first` attempts of each webhook-id.
    fail_first: int = 0
    #: Answer every verified request with this status instead (410: "disable me").
    answer: int | None = None
    #: Recorded on each arrival: a test marks its phases with it.
    tag: str = ""
    arrivals: list[Arrival] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self._verifier = standardwebhooks.Webhook(self.secret)
        self._released = asyncio.Event()
        self._changed = asyncio.Condition()
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    # -- what tests read ------------------------------------------------------------------

    @property
    def ids(self) -> list[str]:
        """Distinct verified webhook-ids, in first-arrival order (the deduped record)."""
        seen: dict[str, None] = {}
        for a in self.arrivals:
            if a.verified:
                seen.setdefault(a.webhook_id, None)
        return list(seen)

    def counts(self) -> Counter[str]:
        return Counter(a.webhook_id for a in self.arrivals)

    def first(self, webhook_id: str) -> Arrival:
        return next(a for a in self.arrivals if a.webhook_id == webhook_id and a.verified)

    async def wait_for(self, predicate: Callable[[], bool], within: float = 10.0) -> None:
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(predicate)

    async def wait_for_ids(self, n: int, within: float = 10.0) -> list[str]:
        await self.wait_for(lambda: len(self.ids) >= n, within)
        return self.ids

    def release(self) -> None:
        self.hold = False
        self._released.set()

    # -- the server -----------------------------------------------------------------------

    async def _hook(self, request: Request) -> Response:
        headers = dict(request.headers)
        try:
            raw = await request.body()
        except ClientDisconnect:
            # Killed mid-request: it did reach us, so it counts as an arrival of its id.
            arrival = Arrival(headers.get("webhook-id", ""), False, headers, None, self.tag, True)
            async with self._changed:
                self.arrivals.append(arrival)
                self._changed.notify_all()
            return Response(status_code=400)
        try:
            body = self._verifier.verify(raw, headers)
            verified = True
        except standardwebhooks.WebhookVerificationError:
            body, verified = None, False
        with contextlib.suppress(ValueError):
            body = body if body is not None else json.loads(raw)
        arrival = Arrival(headers.get("webhook-id", ""), verified, headers, body, self.tag)
        async with self._changed:
            self.arrivals.append(arrival)
            self._changed.notify_all()
        if not verified:
            return Response("bad signature", status_code=401)
        if self.hold:
            await self._released.wait()
        if self.answer is not None:
            return Response(status_code=self.answer)
        if self.counts()[arrival.webhook_id] <= self.fail_first:
            return Response("try again", status_code=500)
        return Response(status_code=204)

    async def __aenter__(self) -> WebhookReceiver:
        app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        config = uvicorn.Config(
            app, host=self.host, port=0, log_config=None, access_log=False, lifespan="off"
        )
        self._server = Server(config)
        self._task = asyncio.create_task(self._server.serve())
        server = self._server

        async def started() -> bool:
            return bool(server.started)

        await eventually(started, within=10)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{port}/hook"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._task, timeout=10)

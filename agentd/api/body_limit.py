"""Refuse request bodies larger than `settings.max_body_bytes` with a 413 problem."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd.api.problems import problem_response

_NO_BODY = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})


class BodyLimit:
    """Pure ASGI: checks Content-Length, then buffers at most `limit` bytes of the body."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _NO_BODY:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                size = -1
            if size < 0:
                await problem_response(
                    400, "bad-request", "The request is malformed.", "invalid Content-Length"
                )(scope, receive, send)
                return
            if size > self.limit:
                await self._too_large(scope, receive, send)
                return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; let the app see the disconnect
            body = message.get("body", b"")
            total += len(body)
            if total > self.limit:
                await self._too_large(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await problem_response(
            413,
            "payload-too-large",
            "The request body is too large.",
            f"request body exceeds {self.limit} bytes",
            max_body_bytes=self.limit,
        )(scope, receive, send)

"""Serving over HTTP: uvicorn inside our event loop (the app is `agentd.app.process_app`).

Shared by `agentd up`, `agentd api`, `agentd worker` (its probe port) and `agentd demo`.
The listening socket is bound before anything else starts, so a taken port is one clear
error at once (not a traceback after the database is up); uvicorn gets no signal handling
of its own, the command's `stop` event ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Iterator, Sequence

from starlette.types import ASGIApp

from agentd.api import untraced as untraced_paths
from agentd.api.head_limits import HeadLimits
from agentd.errors import AddressInUse, AgentdError

#: Settings.trace_excluded_paths's default, for servers started without settings.
DEFAULT_UNTRACED = ("/healthz", "/readyz", "/metrics")


def bind(host: str, port: int, *, setting: str = "AGENTD_PORT or --port") -> socket.socket:
    """A listening socket on host:port; a taken port raises AddressInUse naming `setting`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(
                f"cannot listen on {host}:{port}: the address is in use "
                f"(another agentd? set {setting})"
            ) from None
        raise AddressInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from None


class HttpServer:
    """uvicorn in our event loop, with our signal handling (not uvicorn's), on a socket
    bound when this is created (port 0: an ephemeral one; `port` says which). Every
    request's head is bounded by `limits` (api/http_limits.py)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        setting: str = "AGENTD_PORT or --port",
        limits: HeadLimits | None = None,
        untraced: Sequence[str] = DEFAULT_UNTRACED,
    ) -> None:
        self.socket = bind(host, port, setting=setting)
        self.host = host
        self.port = int(self.socket.getsockname()[1])
        self.limits = limits or HeadLimits()
        self.untraced = list(untraced)  # settings.trace_excluded_paths

    async def serve(self, app: ASGIApp, stop: asyncio.Event) -> None:
        import uvicorn

        from agentd.api.http_limits import protocol_class

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        config = uvicorn.Config(
            untraced_paths.wrap(app, self.untraced),
            host=self.host,
            port=self.port,
            log_config=None,
            access_log=False,
            lifespan="off",
            http=protocol_class(self.limits),
            limit_concurrency=None,
            timeout_graceful_shutdown=5,
        )
        server = Server(config)
        task = asyncio.create_task(server.serve(sockets=[self.socket]))
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        stopper.cancel()
        await task
        if task in done and not stop.is_set():
            raise AgentdError("the HTTP server stopped unexpectedly")

    def close(self) -> None:
        self.socket.close()

"""A real `agentd up` process for tests: started, awaited until ready, stopped with SIGTERM.

    async with AgentdUp(database_url=url, config=path) as up:
        httpx.get(f"{up.base_url}/v1/agents", headers=up.headers)

The process gets a clean environment (no AGENTD_* of the caller's), a free port, a fixed
API token, and JSON logs in `up.output` (printed by tests that fail).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without AGENTD_* (but AGENTD_TEST_*), plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENTD_") or k.startswith("AGENTD_TEST_")
    }
    return {**env, "AGENTD_LOG_FORMAT": "json", **extra}


class AgentdUp:
    def __init__(
        self,
        *,
        database_url: str | None = None,
        data_dir: Path | None = None,
        config: Path | None = None,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        ready_within: float = 60.0,
    ) -> None:
        self.port = free_port()
        self.token = secrets.token_urlsafe(16)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.headers = {"Authorization": f"Bearer {self.token}"}
        extra = {"AGENTD_PORT": str(self.port), "AGENTD_API_TOKEN": self.token, **(env or {})}
        if database_url:
            extra["AGENTD_DATABASE_URL"] = database_url
        if data_dir:
            extra["AGENTD_DATA_DIR"] = str(data_dir)
        self.env = clean_env(**extra)
        self.argv = ["up", *(["--config", str(config)] if config else []), *(args or [])]
        self.ready_within = ready_within
        self.proc: asyncio.subprocess.Process | None = None
        self.output = b""
        self._reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            self.output += chunk

    async def __aenter__(self) -> AgentdUp:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentd",
            *self.argv,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._reader = asyncio.create_task(self._read())
        deadline = time.monotonic() + self.ready_within
        async with httpx.AsyncClient() as client:
            while True:
                if self.proc.returncode is not None:
                    await self._reader
                    raise RuntimeError(f"agentd up exited early:\n{self.text()[-3000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{self.base_url}/readyz")).status_code == 200:
                        return self
                if time.monotonic() > deadline:
                    await self.__aexit__()
                    raise RuntimeError(f"agentd up never became ready:\n{self.text()[-3000:]}")
                await asyncio.sleep(0.1)

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)

    def text(self) -> str:
        return self.output.decode(errors="replace")


class TcpProxy:
    """A TCP forwarder to `target` whose live connections a test can cut (`cut()`), to
    drop a stream mid-flight; new connections keep being forwarded.

        async with TcpProxy(("127.0.0.1", up.port)) as proxy:
            url = f"http://127.0.0.1:{proxy.port}"
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.cuts = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        w.close()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            tr, tw = await asyncio.open_connection(*self.target)
        except OSError:
            w.close()
            return
        self._writers |= {w, tw}
        try:
            await asyncio.gather(self._pipe(r, tw), self._pipe(tr, w))
        finally:
            self._writers -= {w, tw}

    def cut(self) -> None:
        """Abort every live connection (both sides see a reset, not a clean close)."""
        self.cuts += 1
        self._abort_all()

    def _abort_all(self) -> None:
        for w in list(self._writers):
            w.transport.abort()

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            self._abort_all()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

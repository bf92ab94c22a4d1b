"""The database a command runs on: the configured one once it answers, or an embedded one.

Shared by the serving commands (`agentd up | worker | api | reap | prune | migrate`) and
`agentd demo`. A signal while the configured database is still being awaited ends the
wait at once (`Interrupted`), not after AGENTD_DATABASE_WAIT seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from agentd.errors import ConfigError, DatabaseUnavailable
from agentd.settings import Settings

if TYPE_CHECKING:
    from agentd.db.pool import Pool


class Interrupted(Exception):
    """SIGTERM or Ctrl-C arrived while waiting for the database."""


async def _wait_for(url: str, settings: Settings, stop: asyncio.Event | None) -> None:
    from agentd.db import wait

    waiting = asyncio.ensure_future(wait.wait_until_reachable(url, limit=settings.database_wait))
    if stop is None:
        await waiting
        return
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not waiting.done():  # a signal while retrying: leave now, not after the wait
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        raise Interrupted
    waiting.result()


@contextlib.asynccontextmanager
async def ready_url(settings: Settings, stop: asyncio.Event | None = None) -> AsyncIterator[str]:
    """The configured URL once it accepts connections, or an embedded server's."""
    from agentd.db import embedded

    async with contextlib.AsyncExitStack() as stack:
        try:
            url = await stack.enter_async_context(
                embedded.database_url(settings.database_url, settings.data_dir)
            )
        except OSError as exc:  # the data dir cannot be made or written
            raise ConfigError(
                f"cannot start the embedded PostgreSQL in AGENTD_DATA_DIR={settings.data_dir}: "
                f"{exc.strerror or exc}"
            ) from None
        except ConfigError:  # no embedded server in this installation
            raise
        except Exception as exc:
            raise DatabaseUnavailable(
                f"the embedded PostgreSQL in {settings.data_dir} failed to start: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            ) from None
        if settings.database_url:
            for target in dict.fromkeys([url, settings.database_direct_url or url]):
                await _wait_for(target, settings, stop)
        yield url


@contextlib.asynccontextmanager
async def open_database(
    settings: Settings, *, migrate_first: bool, stop: asyncio.Event | None = None
) -> AsyncIterator[tuple[Pool, str]]:
    """A pool on the ready database (migrated first if asked) and its direct URL."""
    from agentd.db import migrate as migrations
    from agentd.db import pool as dbpool

    async with ready_url(settings, stop) as url:
        direct = settings.database_direct_url or url
        if migrate_first:
            conn = await dbpool.connect(direct, application_name="agentd-migrate")
            try:
                await migrations.apply(conn)
            finally:
                await conn.close()
        pool = await dbpool.create_pool(
            url,
            min_size=settings.db_pool_min,
            max_size=settings.db_pool_max,
            statement_cache_size=settings.statement_cache_size(),
        )
        try:
            yield pool, direct
        finally:
            await pool.close()

"""The asyncpg pool and the transaction helper every store call runs under."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg

Pool = asyncpg.Pool
Connection = asyncpg.Connection


async def _init_connection(conn: asyncpg.Connection) -> None:
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Release without `RESET ALL; UNLISTEN *; …` (four round trips per job): pooled
    connections never LISTEN, lock or change session settings. asyncpg still rolls back a
    transaction left open."""


async def create_pool(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    statement_cache_size: int = 0,
    **kw: Any,
) -> Pool:
    """A pool whose connections decode json/jsonb to Python values.

    No prepared-statement cache by default (asyncpg then uses the unnamed statement and
    re-parses it with each execution), for two reasons:
    - a transaction-mode pooler (PgBouncer) hands each transaction a different server
      connection, where a named statement cached on another is missing or already exists;
    - after a migration adds a column, a cached `SELECT *` / `RETURNING *` statement raises
      InvalidCachedStatementError inside its transaction (once per connection and
      statement), which would fail in-flight turns during a rolling upgrade.
    The cost is one extra round trip per query, small beside an LLM call.
    `Settings.db_statement_cache_size` overrides it.
    """
    pool = await asyncpg.create_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        statement_cache_size=statement_cache_size,
        reset=_keep_session,
        server_settings={"application_name": kw.pop("application_name", "agentd")},
        **kw,
    )
    assert pool is not None
    return pool


async def connect(url: str, *, application_name: str = "agentd") -> Connection:
    """A dedicated connection (heartbeat, LISTEN, migrations), outside the pool; no statement
    cache, for the same reasons as the pool's."""
    conn = await asyncpg.connect(
        url, statement_cache_size=0, server_settings={"application_name": application_name}
    )
    await _init_connection(conn)
    return conn


@contextlib.asynccontextmanager
async def transaction(pool: Pool) -> AsyncIterator[Connection]:
    """Take a connection for one transaction; never hold it across a network await."""
    async with pool.acquire() as conn, conn.transaction():
        yield conn


@contextlib.asynccontextmanager
async def connection(pool: Pool) -> AsyncIterator[Connection]:
    async with pool.acquire() as conn:
        yield conn


#: What a lost or unreachable database raises; callers retry or degrade on these.
DB_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)

#: The database went away (server restart, failover, a pooler or an admin killing the
#: backend): not a bad query. Work interrupted by one of these is re-run through its lease.
_LOST: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.InternalClientError,
)


def lost_connection(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says the database connection was lost."""
    seen: BaseException | None = exc
    for _ in range(8):  # a short cause chain; never loop on a cycle
        if seen is None:
            return False
        if isinstance(seen, _LOST):
            return True
        if isinstance(seen, asyncpg.InterfaceError) and "connection" in str(seen):
            return True  # "the underlying connection is closed", "connection was closed"
        if isinstance(seen, OSError) and _raised_in_asyncpg(seen):
            return True  # refused, reset, "unexpected connection_lost() call"
        seen = seen.__cause__ or seen.__context__
    return False


def _raised_in_asyncpg(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if "asyncpg" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


async def until_reachable(
    op: Callable[[], Awaitable[None]], *, attempts: int = 20, max_delay: float = 5.0
) -> BaseException | None:
    """Run `op` until it gets through to the database, backing off between tries (about
    90 s in all). Returns None on success, else the last error. The caller's lease bounds
    it too: a turn whose lease is no longer trusted is cancelled by the LeaseRenewer."""
    delay = 0.2
    last: BaseException | None = None
    for _ in range(attempts):
        try:
            async with asyncio.timeout(10):
                await op()
            return None
        except (*DB_ERRORS, TimeoutError) as exc:
            last = exc
        await asyncio.sleep(delay)  # backoff while the server is away
        delay = min(delay * 2, max_delay)
    return last

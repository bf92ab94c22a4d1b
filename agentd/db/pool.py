"""The asyncpg pool and the transaction helper every store call runs under."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg

Pool = asyncpg.Pool
Connection = asyncpg.Connection


async def _init_connection(conn: asyncpg.Connection) -> None:
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(url: str, *, min_size: int = 1, max_size: int = 10, **kw: Any) -> Pool:
    """A pool whose connections decode json/jsonb to Python values.

    statement_cache_size=0 keeps us compatible with transaction-mode poolers.
    """
    pool = await asyncpg.create_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        statement_cache_size=kw.pop("statement_cache_size", 100),
        server_settings={"application_name": kw.pop("application_name", "agentd")},
        **kw,
    )
    assert pool is not None
    return pool


async def connect(url: str, *, application_name: str = "agentd") -> Connection:
    """A dedicated connection (heartbeat, LISTEN), outside the pool."""
    conn = await asyncpg.connect(url, server_settings={"application_name": application_name})
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

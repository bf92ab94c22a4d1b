"""The pool's prepared-statement cache across a column-adding migration.

A `*` statement inside a transaction is never cached (agentd/db/pool.py CachingConnection),
so a migration that changes `SELECT *` under a live pool never fails a transaction: asyncpg
re-prepares cached statements by itself outside one. A statement naming its columns is
cached inside transactions too, and an added column leaves it valid.
"""

from __future__ import annotations

import asyncpg
import pytest

from agentd.db import pool as dbpool
from agentd.db.pool import schema_changed

QUERY = "SELECT * FROM schedules ORDER BY name LIMIT 1"
NAMED = "SELECT name, cron FROM schedules ORDER BY name LIMIT 1"


def _cached(conn: object) -> list[str]:
    return [s.query for s in conn._stmt_cache.iter_statements()]  # type: ignore[attr-defined]


async def test_hot_statements_are_cached_and_star_statements_in_transactions_are_not(
    database_url: str,
) -> None:
    pool = await dbpool.create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await conn.fetch(QUERY)
            assert QUERY in _cached(conn)
            inside = "SELECT count(*) FROM loops WHERE status = 'queued'"
            async with conn.transaction():
                await conn.fetchval(inside)
                await conn.fetch(NAMED)
            assert inside not in _cached(conn)
            assert NAMED in _cached(conn)
    finally:
        await pool.close()


async def test_column_added_under_a_live_pool_fails_nothing(database_url: str) -> None:
    pool = await dbpool.create_pool(database_url, min_size=2, max_size=2)
    try:
        for _ in range(3):  # warm every connection's cache, in and out of transactions
            async with pool.acquire() as conn:
                await conn.fetch(QUERY)
                async with conn.transaction():
                    await conn.fetch(QUERY)
                    await conn.fetch(NAMED)
        ddl = await asyncpg.connect(database_url)
        try:
            await ddl.execute("ALTER TABLE schedules ADD COLUMN cache_probe text")
        finally:
            await ddl.close()
        for _ in range(3):
            async with pool.acquire() as conn:
                async with conn.transaction():
                    assert await conn.fetch(QUERY) == []
                    assert await conn.fetch(NAMED) == []  # cached, still valid
                await conn.fetch(QUERY)  # outside: re-prepared by asyncpg
    finally:
        await pool.close()


async def test_an_uncached_pool_is_what_poolers_get(database_url: str) -> None:
    pool = await dbpool.create_pool(database_url, min_size=1, max_size=1, statement_cache_size=0)
    try:
        async with pool.acquire() as conn:
            await conn.fetch(QUERY)
            assert list(conn._stmt_cache.iter_statements()) == []
    finally:
        await pool.close()


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (asyncpg.exceptions.InvalidCachedStatementError("cached plan"), True),
        (RuntimeError("wrapped"), False),
    ],
)
def test_schema_changed_reads_the_cause_chain(exc: BaseException, expected: bool) -> None:
    assert schema_changed(exc) is expected
    outer = RuntimeError("outer")
    outer.__cause__ = exc
    assert schema_changed(outer) is expected

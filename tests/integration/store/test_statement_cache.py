"""The pool's prepared-statement cache across a column-adding migration.

Only statements outside a transaction are cached (agentd/db/pool.py CachingConnection), so
a migration that changes `SELECT *` under a live pool never fails a transaction: asyncpg
re-prepares cached statements by itself, and in-transaction statements are never cached.
"""

from __future__ import annotations

import asyncpg
import pytest

from agentd.db import pool as dbpool
from agentd.db.pool import schema_changed

QUERY = "SELECT * FROM schedules ORDER BY name LIMIT 1"


async def test_hot_statements_are_cached_and_transactions_are_not(database_url: str) -> None:
    pool = await dbpool.create_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await conn.fetch(QUERY)
            cached = [s.query for s in conn._stmt_cache.iter_statements()]
            assert QUERY in cached
            inside = "SELECT count(*) FROM loops WHERE status = 'queued'"
            async with conn.transaction():
                await conn.fetchval(inside)
            cached = [s.query for s in conn._stmt_cache.iter_statements()]
            assert inside not in cached
    finally:
        await pool.close()


async def test_column_added_under_a_live_pool_fails_nothing(database_url: str) -> None:
    pool = await dbpool.create_pool(database_url, min_size=2, max_size=2)
    try:
        for _ in range(3):  # warm every connection's cache with the `SELECT *` statement
            async with pool.acquire() as conn:
                await conn.fetch(QUERY)
                async with conn.transaction():
                    await conn.fetch(QUERY)
        ddl = await asyncpg.connect(database_url)
        try:
            await ddl.execute("ALTER TABLE schedules ADD COLUMN cache_probe text")
        finally:
            await ddl.close()
        for _ in range(3):
            async with pool.acquire() as conn:
                async with conn.transaction():
                    rows = await conn.fetch(QUERY)
                    assert rows == []
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

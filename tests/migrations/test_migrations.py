from __future__ import annotations

import asyncio

import asyncpg

from agentd.db import migrate
from agentd.store.queries import QUERIES


async def test_migrations_apply_once_and_rerun_changes_nothing(empty_database_url: str) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        first = await migrate.apply(conn)
        assert [m.version for m in first] == [m.version for m in migrate.load()]
        schema = await conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema='public' ORDER BY 1, 2"
        )
        second = await migrate.apply(conn)
        assert second == []
        assert schema == await conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema='public' ORDER BY 1, 2"
        )
        assert await migrate.is_current(conn)
    finally:
        await conn.close()


async def test_concurrent_migrators_apply_each_migration_once(empty_database_url: str) -> None:
    conns = [await asyncpg.connect(empty_database_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate.apply(c) for c in conns))
        applied = [m.version for r in results for m in r]
        assert sorted(applied) == [m.version for m in migrate.load()]
        rows = await conns[0].fetch("SELECT version FROM schema_migrations")
        assert len(rows) == len(migrate.load())
    finally:
        for c in conns:
            await c.close()


async def test_every_named_query_prepares(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        failures = {}
        for name, q in QUERIES.items():
            try:
                await conn.prepare(q.sql)
            except asyncpg.PostgresError as exc:
                failures[name] = str(exc)
        assert failures == {}
    finally:
        await conn.close()


async def test_lease_columns_are_in_no_index(database_url: str) -> None:
    # Heartbeats must stay HOT updates: no index may mention a lease column.
    conn = await asyncpg.connect(database_url)
    try:
        defs = [
            r["indexdef"]
            for r in await conn.fetch("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'")
        ]
        assert not [d for d in defs if "lease_expires_at" in d or "leased_until" in d]
    finally:
        await conn.close()

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

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


async def test_a_migration_changed_after_it_was_applied_is_refused(
    empty_database_url: str, tmp_path: Path
) -> None:
    for mig in migrate.load():
        (tmp_path / f"{mig.version:04d}_{mig.name}.sql").write_text(mig.sql)
    conn = await asyncpg.connect(empty_database_url)
    try:
        await migrate.apply(conn, tmp_path)
        recorded = await conn.fetch("SELECT version, checksum FROM schema_migrations")
        assert {r["version"]: r["checksum"] for r in recorded} == {
            m.version: m.checksum for m in migrate.load(tmp_path)
        }
        last = migrate.load(tmp_path)[-1]
        path = tmp_path / f"{last.version:04d}_{last.name}.sql"
        path.write_text(last.sql + "\n-- edited after it was applied\n")
        with pytest.raises(migrate.MigrationChanged, match=f"{last.version:04d}_{last.name}"):
            await migrate.apply(conn, tmp_path)
        with pytest.raises(migrate.MigrationChanged):
            await migrate.pending(conn, tmp_path)
        path.write_text(last.sql)
        assert await migrate.apply(conn, tmp_path) == []
    finally:
        await conn.close()


async def test_rows_applied_before_checksums_are_filled_not_judged(
    empty_database_url: str,
) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        await migrate.apply(conn)
        await conn.execute("UPDATE schema_migrations SET checksum = NULL")
        assert await migrate.apply(conn) == []
        missing = await conn.fetchval(
            "SELECT count(*) FROM schema_migrations WHERE checksum IS NULL"
        )
        assert missing == 0
    finally:
        await conn.close()

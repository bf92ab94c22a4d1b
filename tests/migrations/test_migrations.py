from __future__ import annotations

import asyncio
import re
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
        await conn.execute("UPDATE schema_functions SET checksum = 'older' WHERE name = 'webhooks'")
        assert not await migrate.is_current(conn)
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


# -- functions: one home each ---------------------------------------------------------------

_CATALOG = {
    "columns": "SELECT table_name, column_name, data_type, column_default, is_nullable "
    "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
    "FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
    "functions": "SELECT p.oid::regprocedure::text, p.prosrc FROM pg_proc p "
    "WHERE p.pronamespace = 'public'::regnamespace ORDER BY 1",
    "triggers": "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal "
    "ORDER BY 1",
    "options": "SELECT relname, reloptions FROM pg_class "
    "WHERE relnamespace = 'public'::regnamespace AND reloptions IS NOT NULL ORDER BY 1",
}


async def _catalog(conn: asyncpg.Connection) -> dict[str, list[tuple[object, ...]]]:
    return {k: [tuple(r) for r in await conn.fetch(q)] for k, q in _CATALOG.items()}


def test_no_migration_defines_a_function_or_trigger() -> None:
    for mig in migrate.load():
        text = mig.sql.upper()
        assert "CREATE FUNCTION" not in text and "OR REPLACE FUNCTION" not in text, mig.name
        assert "CREATE TRIGGER" not in text and "OR REPLACE TRIGGER" not in text, mig.name


async def test_every_function_in_the_database_has_one_home(database_url: str) -> None:
    homes: dict[str, list[str]] = {}
    for fn in migrate.load_functions():
        for name in re.findall(r"CREATE OR REPLACE FUNCTION (\w+)\(", fn.sql):
            homes.setdefault(name, []).append(fn.name)
    conn = await asyncpg.connect(database_url)
    try:
        live = {
            r["proname"]
            for r in await conn.fetch(
                "SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
            )
        }
    finally:
        await conn.close()
    assert live == set(homes)
    assert {name: files for name, files in homes.items() if len(set(files)) > 1} == {}


async def test_a_database_migrated_release_by_release_equals_a_fresh_one(
    empty_database_url: str, database_url: str, tmp_path: Path
) -> None:
    # Each prefix of the migrations stands for a release that ran `agentd migrate`.
    step = await asyncpg.connect(empty_database_url)
    fresh = await asyncpg.connect(database_url)
    try:
        for mig in migrate.load():
            (tmp_path / f"{mig.version:04d}_{mig.name}.sql").write_text(mig.sql)
            await migrate.apply(step, tmp_path)
        assert await _catalog(step) == await _catalog(fresh)
    finally:
        await step.close()
        await fresh.close()


async def test_a_changed_function_file_is_applied_again_and_only_it(
    empty_database_url: str, tmp_path: Path
) -> None:
    functions = tmp_path / "functions"
    functions.mkdir()
    for fn in migrate.load_functions():
        (functions / f"{fn.name}.sql").write_text(fn.sql)
    conn = await asyncpg.connect(empty_database_url)
    try:
        await migrate.apply(conn, functions=functions)
        assert await migrate.pending_functions(conn, functions) == []
        path = functions / "loop_state_version.sql"
        path.write_text(path.read_text().replace("BEGIN", "BEGIN\n    -- a new release's body", 1))
        assert [f.name for f in await migrate.pending_functions(conn, functions)] == [
            "loop_state_version"
        ]
        await migrate.apply(conn, functions=functions)
        src = await conn.fetchval(
            "SELECT prosrc FROM pg_proc WHERE proname = 'agentd_bump_state_version'"
        )
        assert "a new release's body" in src
        assert await migrate.pending_functions(conn, functions) == []
    finally:
        await conn.close()


async def test_an_older_release_leaves_a_newer_ones_functions_alone(
    database_url: str, tmp_path: Path
) -> None:
    functions = tmp_path / "functions"
    functions.mkdir()
    for fn in migrate.load_functions():
        (functions / f"{fn.name}.sql").write_text(fn.sql.replace("BEGIN", "BEGIN\n -- old", 1))
    conn = await asyncpg.connect(database_url)
    try:
        newest = max(m.version for m in migrate.load())
        await conn.execute(
            "INSERT INTO schema_migrations (version, name, checksum) "
            "VALUES ($1, 'a_newer_release', 'x')",
            newest + 1,
        )
        assert await migrate.pending_functions(conn, functions) == []
        await migrate.apply(conn, functions=functions)
        assert not await conn.fetchval("SELECT count(*) FROM pg_proc WHERE prosrc LIKE '%-- old%'")
    finally:
        await conn.close()


async def test_a_database_of_a_pre_release_build_is_refused_with_a_clear_reason(
    empty_database_url: str,
) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        await conn.execute(
            "INSERT INTO schema_migrations (version, name) "
            "SELECT v, 'pre_release_' || v FROM generate_series(1, 24) v"
        )
        with pytest.raises(migrate.MigrationChanged, match=r"another build.*before 0\.1\.0"):
            await migrate.apply(conn)
        with pytest.raises(migrate.MigrationChanged):
            await migrate.pending(conn)
    finally:
        await conn.close()

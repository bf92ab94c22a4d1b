"""Forward-only schema migrations, and the database's functions kept in one place each.

Schema changes live in `migrations/NNNN_name.sql`, applied once each under an advisory lock
and recorded in `schema_migrations` with the SHA-256 of the file: a migration file changed
after a database applied it is refused (`MigrationChanged`) instead of silently diverging.

Every PostgreSQL function (and the trigger that calls it) has one home,
`agentd/store/sql/functions/*.sql`, written with `CREATE OR REPLACE`. After the migrations,
`apply` (re)applies each file whose checksum differs from the one recorded in
`schema_functions`, so a release changes a function by editing its file, never by copying
its body into a migration. Only a release at least as new as the database does this: when
the database records migrations this release does not have, a newer release has migrated
it and owns the function bodies (docs/upgrading.md). A function's signature change or
removal is a schema change: its migration drops the old signature.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import asyncpg

from agentd import logs
from agentd.errors import ConfigError

log = logs.get("agentd.db.migrate")

LOCK_KEY = 0x6167656E7464  # "agentd"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_FUNCTION_FILE = re.compile(r"^[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class FunctionFile:
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations_dir() -> Path:
    packaged = resources.files("agentd") / "_migrations"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "migrations"


def functions_dir() -> Path:
    return Path(str(resources.files("agentd.store") / "sql" / "functions"))


def load(directory: Path | None = None) -> list[Migration]:
    directory = directory or migrations_dir()
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        m = _NAME.match(path.name)
        if not m:
            raise ConfigError(f"migration file name not NNNN_name.sql: {path.name}")
        found.append(Migration(int(m.group(1)), m.group(2), path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ConfigError(f"duplicate migration versions in {directory}")
    return found


def load_functions(directory: Path | None = None) -> list[FunctionFile]:
    directory = directory or functions_dir()
    found: list[FunctionFile] = []
    for path in sorted(directory.glob("*.sql")):
        if not _FUNCTION_FILE.match(path.name):
            raise ConfigError(f"function file name not lower_snake.sql: {path.name}")
        found.append(FunctionFile(path.stem, path.read_text()))
    return found


_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
-- Databases migrated before checksums were recorded get the column; their rows are
-- filled with the file's checksum the next time `apply` runs (see verify).
ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text;
CREATE TABLE IF NOT EXISTS schema_functions (
    name       text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


class MigrationChanged(ConfigError):
    """The database's recorded migrations do not match this release's files."""


@dataclass(frozen=True)
class _Applied:
    name: str
    checksum: str | None


async def _recorded(conn: asyncpg.Connection) -> dict[int, _Applied]:
    columns = {
        r["column_name"]
        for r in await conn.fetch(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'schema_migrations' AND table_schema = current_schema()"
        )
    }
    if not columns:
        return {}
    checksum = "checksum" if "checksum" in columns else "NULL::text"
    rows = await conn.fetch(f"SELECT version, name, {checksum} AS checksum FROM schema_migrations")
    return {r["version"]: _Applied(r["name"], r["checksum"]) for r in rows}


async def verify(conn: asyncpg.Connection, migrations: list[Migration] | None = None) -> None:
    """Raise MigrationChanged when the database's migrations are not this release's.

    A recorded migration whose file changed (its checksum or its name), or one this release
    does not have although later ones of it are recorded (a database made by a pre-0.1.0
    build, whose migrations were squashed into the baseline), is refused. Rows recorded
    before checksums existed (NULL) are judged by name only; `apply` fills them in.
    Recorded versions above this release's newest are a newer release's: left alone.
    """
    migrations = migrations if migrations is not None else load()
    recorded = await _recorded(conn)
    if not recorded or not migrations:
        return
    newest = max(m.version for m in migrations)
    known = {m.version for m in migrations}
    renamed = [
        f"{m.version:04d}_{r.name} where this release has {m.version:04d}_{m.name}"
        for m in migrations
        if (r := recorded.get(m.version)) is not None and r.name != m.name
    ]
    unknown = [
        f"{v:04d}_{r.name} is not one of this release's migrations"
        for v, r in sorted(recorded.items())
        if v < newest and v not in known
    ]
    if renamed or unknown:
        raise MigrationChanged(
            f"this database was migrated by another build of agentd ({(renamed + unknown)[0]}); "
            "a database made before 0.1.0, whose migrations were squashed into "
            "0001_baseline, cannot be upgraded: create a new database (for the embedded "
            "default, an empty AGENTD_DATA_DIR)"
        )
    changed = [
        f"{m.version:04d}_{m.name}"
        for m in migrations
        if (r := recorded.get(m.version)) is not None and r.checksum not in (None, m.checksum)
    ]
    if changed:
        raise MigrationChanged(
            f"migration file(s) changed after this database applied them: {', '.join(changed)}. "
            "Migrations are forward-only: restore the applied file and put the change in a "
            "new migration (or recreate a development database)"
        )


async def applied_versions(conn: asyncpg.Connection) -> set[int]:
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return set()
    return {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}


async def pending(conn: asyncpg.Connection, directory: Path | None = None) -> list[Migration]:
    """The migrations not applied yet; raises MigrationChanged if an applied one changed."""
    migrations = load(directory)
    await verify(conn, migrations)
    done = await applied_versions(conn)
    return [m for m in migrations if m.version not in done]


async def pending_functions(
    conn: asyncpg.Connection,
    directory: Path | None = None,
    migrations: list[Migration] | None = None,
) -> list[FunctionFile]:
    """The function files this release would (re)apply: none when a newer release migrated."""
    migrations = migrations if migrations is not None else load()
    if await _newer_release_migrated(conn, migrations):
        return []
    exists = await conn.fetchval("SELECT to_regclass('schema_functions') IS NOT NULL")
    recorded: dict[str, str] = {}
    if exists:
        recorded = {
            r["name"]: r["checksum"]
            for r in await conn.fetch("SELECT name, checksum FROM schema_functions")
        }
    return [f for f in load_functions(directory) if recorded.get(f.name) != f.checksum]


async def _newer_release_migrated(conn: asyncpg.Connection, migrations: list[Migration]) -> bool:
    if not migrations:
        return False
    newest = max(m.version for m in migrations)
    return any(v > newest for v in await applied_versions(conn))


#: Per migration transaction: how long a DDL statement may queue for its lock. While an
#: ALTER TABLE waits, every query on that table queues behind it, so a migration that
#: cannot get its lock quickly gives up, lets traffic through, and tries again.
LOCK_TIMEOUT_MS = 5_000
LOCK_RETRIES = 20
_RETRYABLE = (asyncpg.exceptions.LockNotAvailableError, asyncpg.exceptions.DeadlockDetectedError)


async def apply(
    conn: asyncpg.Connection,
    directory: Path | None = None,
    *,
    functions: Path | None = None,
    lock_timeout_ms: int = LOCK_TIMEOUT_MS,
    retries: int = LOCK_RETRIES,
) -> list[Migration]:
    """Apply every pending migration (from `directory`, default the packaged ones), then
    every function file (from `functions`) that changed since the database last took it.

    Returns the migrations this call applied. Each migration, and each function file, is
    one transaction with a `lock_timeout`; one that times out on a lock or is chosen as a
    deadlock victim is retried with backoff, so migrating a live database never stalls its
    workers for long. Versions recorded in the database but newer than this release's
    (a newer release ran `agentd migrate`) are left alone, and so are the functions then:
    migrations are forward-only, and expand-only across a release, so the older code keeps
    working (docs/upgrading.md).
    """
    applied: list[Migration] = []
    await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
    try:
        await conn.execute(_BOOKKEEPING)
        migrations = load(directory)
        await verify(conn, migrations)
        await _fill_checksums(conn, migrations)
        done = await applied_versions(conn)
        for mig in migrations:
            if mig.version in done:
                continue
            step = functools.partial(_apply_migration, conn, mig)
            await _retrying(conn, step, mig.name, lock_timeout_ms, retries)
            log.info("migration.applied", version=mig.version, name=mig.name)
            applied.append(mig)
        for fn in await pending_functions(conn, functions, migrations):
            step = functools.partial(_apply_functions, conn, fn)
            await _retrying(conn, step, fn.name, lock_timeout_ms, retries)
            log.info("functions.applied", name=fn.name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
    return applied


async def _fill_checksums(conn: asyncpg.Connection, migrations: list[Migration]) -> None:
    await conn.execute(
        "UPDATE schema_migrations s SET checksum = m.checksum "
        "FROM unnest($1::int[], $2::text[]) AS m(version, checksum) "
        "WHERE s.version = m.version AND s.checksum IS NULL",
        [m.version for m in migrations],
        [m.checksum for m in migrations],
    )


async def _apply_migration(conn: asyncpg.Connection, mig: Migration) -> None:
    await conn.execute(mig.sql)
    await conn.execute(
        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
        mig.version,
        mig.name,
        mig.checksum,
    )


async def _apply_functions(conn: asyncpg.Connection, fn: FunctionFile) -> None:
    # A body may name a function of a file applied after it: PL/pgSQL bodies are checked
    # when they first run, not here.
    await conn.execute("SET LOCAL check_function_bodies = off")
    await conn.execute(fn.sql)
    await conn.execute(
        "INSERT INTO schema_functions (name, checksum) VALUES ($1, $2) "
        "ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = now()",
        fn.name,
        fn.checksum,
    )


async def _retrying(
    conn: asyncpg.Connection,
    step: Callable[[], Awaitable[None]],
    name: str,
    lock_timeout_ms: int,
    retries: int,
) -> None:
    delay = 0.1
    for attempt in range(retries + 1):
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
                await step()
            return
        except _RETRYABLE as exc:
            if attempt == retries:
                raise
            log.warning(
                "migration.lock_retry",
                name=name,
                error=type(exc).__name__,
                attempt=attempt + 1,
                retry_in=delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


async def is_current(conn: asyncpg.Connection) -> bool:
    migrations = load()
    if await pending(conn):
        return False
    return not await pending_functions(conn, migrations=migrations)

"""Forward-only migrations from `migrations/NNNN_name.sql`, applied under an advisory lock.

Several daemons starting at once serialize on the lock; each migration is applied once
and recorded in `schema_migrations` with the SHA-256 of its file, so a migration file that
changed after a database applied it is refused instead of silently diverging.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import asyncpg

from agentd import logs
from agentd.errors import ConfigError

log = logs.get("agentd.db.migrate")

LOCK_KEY = 0x6167656E7464  # "agentd"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
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


_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
-- Databases migrated before checksums were recorded get the column; their rows are
-- filled with the file's checksum the next time `apply` runs (see _verify).
ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum text"""


class MigrationChanged(ConfigError):
    """A migration file differs from the one the database applied."""


async def _recorded(conn: asyncpg.Connection) -> dict[int, str | None]:
    exists = await conn.fetchval(
        "SELECT count(*) = 1 FROM information_schema.columns "
        "WHERE table_name = 'schema_migrations' AND column_name = 'checksum' "
        "AND table_schema = current_schema()"
    )
    if not exists:
        return {}
    rows = await conn.fetch("SELECT version, checksum FROM schema_migrations")
    return {r["version"]: r["checksum"] for r in rows}


async def verify(conn: asyncpg.Connection, migrations: list[Migration] | None = None) -> None:
    """Raise MigrationChanged when an applied migration's file no longer matches.

    Rows recorded before checksums existed (NULL) are not judged; `apply` fills them in.
    """
    recorded = await _recorded(conn)
    changed = [
        m for m in (migrations if migrations is not None else load())
        if recorded.get(m.version) not in (None, m.checksum)
    ]
    if changed:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in changed)
        raise MigrationChanged(
            f"migration file(s) changed after this database applied them: {names}. "
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
    lock_timeout_ms: int = LOCK_TIMEOUT_MS,
    retries: int = LOCK_RETRIES,
) -> list[Migration]:
    """Apply every pending migration (from `directory`, default the packaged ones).

    Returns the ones this call applied. Each migration is one transaction with a
    `lock_timeout`; one that times out on a lock or is chosen as a deadlock victim is
    retried with backoff, so migrating a live database never stalls its workers for long.
    Versions recorded in the database but absent from `directory` (a newer release ran
    `agentd migrate`) are left alone: migrations are forward-only, and expand-only across
    a release, so the older code keeps working (docs/upgrading.md).
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
            await _apply_one(conn, mig, lock_timeout_ms=lock_timeout_ms, retries=retries)
            log.info("migration.applied", version=mig.version, name=mig.name)
            applied.append(mig)
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


async def _apply_one(
    conn: asyncpg.Connection, mig: Migration, *, lock_timeout_ms: int, retries: int
) -> None:
    delay = 0.1
    for attempt in range(retries + 1):
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
                await conn.execute(mig.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    mig.version,
                    mig.name,
                    mig.checksum,
                )
            return
        except _RETRYABLE as exc:
            if attempt == retries:
                raise
            log.warning(
                "migration.lock_retry",
                version=mig.version,
                name=mig.name,
                error=type(exc).__name__,
                attempt=attempt + 1,
                retry_in=delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


async def is_current(conn: asyncpg.Connection) -> bool:
    return not await pending(conn)

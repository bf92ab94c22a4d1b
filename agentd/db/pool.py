"""The asyncpg pool, the transaction helpers every store call runs under, and the one
place asyncpg exceptions become agentd errors (`translate_pg_errors`, applied by
`transaction()` and `connection()`): above the store, code catches `agentd.errors`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeAlias

import asyncpg

from agentd.db import storable
from agentd.errors import DatabaseError, DatabaseUnavailable, SchemaChanged

Pool: TypeAlias = asyncpg.Pool
Connection: TypeAlias = asyncpg.Connection
Record: TypeAlias = asyncpg.Record


class StorableConnection(asyncpg.Connection):
    """Makes every text parameter storable (`agentd.db.storable`) before it is sent.

    The one place outside text (a model's NUL, a tool's lone surrogate) is made storable,
    so no store function can forget it; json/jsonb parameters are cleaned by their codec.
    """

    async def execute(self, query: str, *args: object, **kw: object) -> str:
        return await super().execute(query, *storable.args(args), **kw)

    async def executemany(self, command: str, args: Any, **kw: Any) -> None:
        await super().executemany(command, [storable.args(tuple(a)) for a in args], **kw)

    async def fetch(self, query: str, *args: object, **kw: object) -> list[Record]:
        return await super().fetch(query, *storable.args(args), **kw)

    async def fetchrow(self, query: str, *args: object, **kw: object) -> Any:
        return await super().fetchrow(query, *storable.args(args), **kw)

    async def fetchval(self, query: str, *args: object, **kw: object) -> Any:
        return await super().fetchval(query, *storable.args(args), **kw)

    async def fetchmany(self, query: str, args: Any, **kw: Any) -> list[Record]:
        return await super().fetchmany(query, [storable.args(tuple(a)) for a in args], **kw)


class CachingConnection(StorableConnection):
    """Caches prepared statements, but not a `*` statement run inside a transaction.

    A migration that adds a column outdates a cached statement whose result has a column
    per table column (`SELECT *`, `RETURNING *`): PostgreSQL refuses it ("cached plan must
    not change result type"). Outside a transaction asyncpg re-prepares and retries it by
    itself; inside one it can only raise, failing the transaction. So inside a transaction
    a statement with a `*` anywhere in its text (a `count(*)` too: cheap caution) is
    prepared unnamed each time, as with no cache at all. A statement that names its result
    columns keeps its result type across an added column (PostgreSQL re-plans it quietly)
    and is cached everywhere: a loop's start over REST runs half a dozen such statements in
    one transaction, and preparing each anew was a fifth of the API's CPU in a burst of
    starts (bench B12). No statement here returns a table's row type as one column.
    """

    async def _get_statement(self, query: str, timeout: float | None, **kw: object) -> Any:  # noqa: ASYNC109 (asyncpg signature)
        if kw.get("use_cache", True) and "*" in query and self.is_in_transaction():
            kw["use_cache"] = False
        return await super()._get_statement(query, timeout, **kw)


async def _init_connection(conn: asyncpg.Connection) -> None:
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(
            typ, encoder=storable.dumps, decoder=storable.loads, schema="pg_catalog"
        )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Release without `RESET ALL; UNLISTEN *; …` (four round trips per job): pooled
    connections never LISTEN, lock or change session settings. asyncpg still rolls back a
    transaction left open."""


async def create_pool(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    statement_cache_size: int = 100,
    **kw: Any,
) -> Pool:
    """A pool whose connections decode json/jsonb to Python values.

    The prepared-statement cache (on by default) saves a round trip and a re-parse and
    re-plan per query: asyncpg otherwise prepares the unnamed statement anew each time.
    Pass 0 behind a transaction-mode pooler (PgBouncer < 1.21 hands each transaction a
    different server connection, where a named statement is missing or already exists);
    `Settings.statement_cache_size()` does. After a migration adds a column, a cached
    `SELECT *` statement no longer matches; such a statement is cached only outside a
    transaction (CachingConnection), where asyncpg re-prepares and retries it by itself.
    Should one still fail (`schema_changed()`), the turn or tool call that hit it is handed
    back and re-run, and the API answers 503 with Retry-After.
    """
    pool = await asyncpg.create_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        statement_cache_size=statement_cache_size,
        connection_class=kw.pop("connection_class", CachingConnection),
        reset=_keep_session,
        server_settings={"application_name": kw.pop("application_name", "agentd")},
        **kw,
    )
    assert pool is not None
    return pool


async def connect(url: str, *, application_name: str = "agentd") -> Connection:
    """A dedicated connection (heartbeat, LISTEN, migrations), outside the pool, on the direct
    URL. No statement cache: it runs few statements, and migrations change the schema."""
    conn = await asyncpg.connect(
        url,
        statement_cache_size=0,
        server_settings={"application_name": application_name},
        connection_class=StorableConnection,
    )
    await _init_connection(conn)
    return conn


def transaction(pool: Pool) -> Held:
    """Take a connection for one transaction; never hold it across a network await.
    The acquire, every statement of the block and the commit raise agentd errors."""
    return Held(pool, in_transaction=True)


def connection(pool: Pool) -> Held:
    """Take a pooled connection; its statements raise agentd errors, as in transaction()."""
    return Held(pool, in_transaction=False)


class Held:
    """`async with connection(pool) as conn` (or `transaction(pool)`): a pooled connection
    for the block, released after it (the transaction committed, or rolled back on an
    exception); the acquire, the block's statements, the commit and the release raise
    agentd errors (translate_pg_errors). A class, not two nested generator context
    managers: the worker enters one 1.5 times a job, and the block costs 26 us with it
    against 33 (acquire and release, no statement)."""

    __slots__ = ("_conn", "_in_transaction", "_pool", "_tx")

    def __init__(self, pool: Pool, *, in_transaction: bool) -> None:
        self._pool = pool
        self._in_transaction = in_transaction
        self._conn: Connection | None = None
        self._tx: Any = None

    async def __aenter__(self) -> Connection:
        if self._conn is not None:
            raise RuntimeError("a connection() block cannot be entered twice")
        try:
            conn: Connection = await self._pool.acquire()
            if self._in_transaction:
                tx = conn.transaction()
                try:
                    await tx.start()
                except BaseException:
                    await self._pool.release(conn)
                    raise
                self._tx = tx
        except DB_ERRORS as exc:
            raise translated(exc) from exc
        self._conn = conn
        return conn

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        conn, tx = self._conn, self._tx
        self._conn = self._tx = None
        try:
            try:
                if tx is not None:
                    await tx.__aexit__(typ, exc, tb)
            finally:
                await self._pool.release(conn)
        except DB_ERRORS as raised:
            raise translated(raised) from raised
        if isinstance(exc, DB_ERRORS):
            raise translated(exc) from exc


#: What the driver raises (a lost or unreachable database, a refused statement); above db/
#: and store/ they arrive translated (translate_pg_errors), as agentd.errors.DatabaseError.
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


_SCHEMA_CHANGED: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.InvalidCachedStatementError,
    asyncpg.exceptions.OutdatedSchemaCacheError,
)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and what caused it: a short chain, never looping on a cycle."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return
        yield seen
        seen = seen.__cause__ or seen.__context__


def _lost(exc: BaseException) -> bool:
    if isinstance(exc, _LOST):
        return True
    if isinstance(exc, asyncpg.InterfaceError) and "connection" in str(exc):
        return True  # "the underlying connection is closed", "connection was closed"
    # refused, reset, "unexpected connection_lost() call"
    return isinstance(exc, OSError) and _raised_in_asyncpg(exc)


def lost_connection(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says the database connection was lost."""
    return any(_lost(e) for e in _causes(exc))


def schema_changed(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a cached statement outdated by a migration: the
    transaction failed before it wrote anything, and running it again will succeed."""
    return any(isinstance(e, _SCHEMA_CHANGED) for e in _causes(exc))


def refused_write(exc: BaseException) -> str | None:
    """A message fit for users when the server refused a statement (`exc` or what caused it
    is a PostgreSQL error): which class of refusal, never the driver's wording."""
    for e in _causes(exc):
        if isinstance(e, asyncpg.PostgresError):
            state = getattr(e, "sqlstate", None) or "?"
            return f"the database refused to store this turn (SQLSTATE {state}); see the worker log"
    return None


#: What until_reachable() retries: agentd's errors, or the driver's from a bare connection
#: (TimeoutError, raised by asyncio.timeout there, is an OSError).
_RETRIED: tuple[type[BaseException], ...] = (*DB_ERRORS, DatabaseError)


def translated(exc: BaseException) -> DatabaseError:
    """A driver error (or an OSError) as agentd's own: SchemaChanged, DatabaseUnavailable
    (the connection was lost), else DatabaseError. Raise it `from exc`."""
    if schema_changed(exc):
        cls: type[DatabaseError] = SchemaChanged
    elif lost_connection(exc):
        cls = DatabaseUnavailable
    else:
        cls = DatabaseError
    return cls(str(exc) or type(exc).__name__, driver=type(exc).__name__)


@contextlib.contextmanager
def translate_pg_errors() -> Iterator[None]:
    """The one place asyncpg exceptions become agentd errors (procrastinate's
    `wrap_exceptions`); the original stays `__cause__`, so refused_write() still reads it."""
    try:
        yield
    except DB_ERRORS as exc:
        raise translated(exc) from exc


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
        except _RETRIED as exc:
            last = exc
        await asyncio.sleep(delay)  # backoff while the server is away
        delay = min(delay * 2, max_delay)
    return last

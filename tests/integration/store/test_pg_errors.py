"""Above the store, database failures arrive as agentd errors; the driver's is the cause."""

from __future__ import annotations

import asyncpg
import pytest

from agentd.db.pool import Pool, connection, transaction
from agentd.errors import DatabaseError, DatabaseUnavailable, FenceLost, SchemaChanged
from agentd.states import LoopStatus
from agentd.store import loops
from agentd.testing import factories


async def test_a_refused_statement_is_a_database_error(pool: Pool) -> None:
    async with transaction(pool) as conn:
        loop = await factories.loop(conn)
    with pytest.raises(DatabaseError) as caught:
        async with transaction(pool) as conn:
            # a status no CHECK allows: the store passes it, the database refuses it
            await loops.set_status(
                conn,
                loop_id=loop.id,
                status="sleeping",  # type: ignore[arg-type]
                execution_token=None,
                reason=None,
            )
    assert type(caught.value) is DatabaseError
    assert isinstance(caught.value.__cause__, asyncpg.CheckViolationError)
    assert caught.value.driver == "CheckViolationError"
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=loop.id)
    assert row is not None and row.status == LoopStatus.RUNNING  # rolled back


async def test_a_lost_connection_is_database_unavailable(pool: Pool) -> None:
    with pytest.raises(DatabaseUnavailable) as caught:
        async with connection(pool) as conn:
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    assert not isinstance(caught.value, SchemaChanged)
    assert caught.value.__cause__ is not None


async def test_agentd_errors_and_control_flow_pass_through(pool: Pool) -> None:
    with pytest.raises(FenceLost):
        async with transaction(pool):
            raise FenceLost()
    with pytest.raises(ValueError):
        async with connection(pool):
            raise ValueError("not the database's")


async def test_a_refused_commit_is_a_database_error_and_every_connection_comes_back(
    pool: Pool,
) -> None:
    async with connection(pool) as conn:
        await conn.execute(
            "CREATE TABLE commit_parent (id int PRIMARY KEY);"
            "CREATE TABLE commit_child (parent int REFERENCES commit_parent"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
    with pytest.raises(DatabaseError) as caught:
        async with transaction(pool) as conn:
            await conn.execute("INSERT INTO commit_child VALUES (9)")  # checked at COMMIT
    assert isinstance(caught.value.__cause__, asyncpg.ForeignKeyViolationError)
    with pytest.raises(DatabaseError):
        async with connection(pool) as conn:
            await conn.execute("SELECT * FROM no_such_table")
    # Every block above gave its connection back, committed or not.
    assert pool.get_idle_size() == pool.get_size()
    async with transaction(pool) as conn:
        assert await conn.fetchval("SELECT count(*) FROM commit_child") == 0
        assert conn.is_in_transaction()
    async with connection(pool) as conn:
        assert not conn.is_in_transaction()


async def test_a_block_cannot_be_entered_twice(pool: Pool) -> None:
    held = connection(pool)
    async with held:
        with pytest.raises(RuntimeError):
            async with held:
                pass
    assert pool.get_idle_size() == pool.get_size()

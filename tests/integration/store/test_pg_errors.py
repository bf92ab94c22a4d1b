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

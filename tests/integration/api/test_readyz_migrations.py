from __future__ import annotations

import httpx

from agentd.db.pool import Pool, connection


async def test_readyz_names_a_migration_changed_after_it_was_applied(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    first = (await client.get("/readyz")).json()
    assert first["checks"]["migrations"] == "current"
    async with connection(pool) as conn:
        await conn.execute(
            "UPDATE schema_migrations SET checksum = 'edited' "
            "WHERE version = (SELECT max(version) FROM schema_migrations)"
        )
    r = await client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["checks"]["migrations"] == "changed"

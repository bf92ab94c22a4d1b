"""Every kind of parameter a store function sends (text, text[], json, jsonb, jsonb[]), from
every connection agentd opens (pooled and dedicated), accepts text PostgreSQL cannot hold."""

from __future__ import annotations

import pytest

from agentd.db import pool as dbpool

NASTY = ["a\x00b", "x\ud800y", "\udfff", "\ud83d\ude00", "ok", "\\u0000 literal"]
CLEAN = ["a\ufffdb", "x\ufffdy", "\ufffd", "\U0001f600", "ok", "\\u0000 literal"]


@pytest.mark.parametrize("dedicated", [False, True], ids=["pooled", "dedicated"])
async def test_every_parameter_kind_stores_nasty_text_as_u_fffd(
    pool: dbpool.Pool, database_url: str, dedicated: bool
) -> None:
    conn = await dbpool.connect(database_url) if dedicated else await pool.acquire()
    try:
        for bad, good in zip(NASTY, CLEAN, strict=True):
            assert await conn.fetchval("SELECT $1::text", bad) == good
            doc = {bad: [bad, float("nan")]}
            assert await conn.fetchval("SELECT $1::jsonb", doc) == {good: [good, None]}
            assert await conn.fetchval("SELECT $1::json", doc) == {good: [good, None]}
        assert await conn.fetchval("SELECT $1::text[]", [*NASTY, None]) == [*CLEAN, None]
        assert await conn.fetchval("SELECT $1::jsonb[]", [{"k": b} for b in NASTY]) == [
            {"k": g} for g in CLEAN
        ]
        await conn.execute("CREATE TEMP TABLE t (v text)")
        await conn.executemany("INSERT INTO t VALUES ($1)", [(b,) for b in NASTY])
        assert [r["v"] for r in await conn.fetch("SELECT v FROM t")] == CLEAN
    finally:
        if dedicated:
            await conn.close()
        else:
            await pool.release(conn)

"""B7 janitor: what the default wire-log retention costs on a large table.

A throwaway database gets `--events` event rows over `--loops` loops — `--wire-share` of
them wire logs (llm.request / mcp.*, new-form, ~300 bytes each), the rest transition
events — and `--parts` wire parts; `--old-share` of every kind is 40 days old, and that
share of the loops is idle (all its parts old). Then one `Janitor.prune_once()` with the
default settings (30 days, batches of 1000) runs while a writer inserts one event row per
2 ms, timing its inserts: the janitor's cost is its total time, its time per batch, and
what it does to concurrent writes.

    python -m bench.b7_janitor [--events 1000000 --loops 2000 --parts 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import asyncpg

from bench.common import ThrowawayDB, pct, save, table

SEED = """
INSERT INTO loops (id, agent, status, state)
SELECT ('00000000-0000-0000-0000-' || lpad(to_hex(g), 12, '0'))::uuid, 'b7', 'completed', '{}'
FROM generate_series(1, $1) g;

INSERT INTO events (loop_id, name, request_data, response_data, created_at)
SELECT ('00000000-0000-0000-0000-' || lpad(to_hex(1 + g % $1), 12, '0'))::uuid,
       CASE WHEN g % 100 < $3::float8 * 100
            THEN (CASE WHEN g % 3 = 0 THEN 'mcp.tools/call' ELSE 'llm.request' END)
            ELSE 'turn.completed' END,
       CASE WHEN g % 100 < $3::float8 * 100 THEN jsonb_build_object(
            'headers', jsonb_build_object('content-type', 'application/json'),
            'body_ref', jsonb_build_object('v', 1, 'manifest', md5(g::text),
                                           'sha256', md5(g::text) || md5(g::text),
                                           'bytes', g, 'redacted', false)) END,
       CASE WHEN g % 100 < $3::float8 * 100 THEN jsonb_build_object('body', repeat('r', 80)) END,
       now() - CASE WHEN (g / 7) % 100 < $4::float8 * 100 THEN interval '40 days'
                    ELSE interval '1 day' END
FROM generate_series(1, $2) g;

INSERT INTO wire_parts (loop_id, key, body, created_at)
SELECT ('00000000-0000-0000-0000-' || lpad(to_hex(1 + g % $1), 12, '0'))::uuid,
       decode(md5(g::text), 'hex'), repeat('p', 150),
       now() - CASE WHEN (1 + g % $1) % 100 < $2::float8 * 100 THEN interval '40 days'
                    ELSE interval '1 day' END
FROM generate_series(1, $3) g;
"""


async def writer(url: str, stop: asyncio.Event, lat: list[float]) -> None:
    c = await asyncpg.connect(url)
    try:
        lid = await c.fetchval("SELECT id FROM loops LIMIT 1")
        while not stop.is_set():
            t = time.perf_counter()
            await c.execute(
                "INSERT INTO events (loop_id, name, request_data) VALUES ($1, 'llm.request',"
                " '{\"headers\": {}}')",
                lid,
            )
            lat.append(1000 * (time.perf_counter() - t))
            await asyncio.sleep(0.002)
    finally:
        await c.close()


async def run(a: argparse.Namespace) -> dict[str, Any]:
    from agentd.db.pool import create_pool
    from agentd.engine.janitor import Janitor
    from agentd.settings import Settings

    async with ThrowawayDB("b7janitor") as tdb:
        c = await asyncpg.connect(tdb.url)
        t0 = time.perf_counter()
        loops_sql, events_sql, parts_sql = SEED.strip().split(";\n\n")
        await c.execute(loops_sql, a.loops)
        await c.execute(events_sql, a.loops, a.events, a.wire_share, a.old_share)
        await c.execute(parts_sql, a.loops, a.old_share, a.parts)
        await c.execute("VACUUM ANALYZE events")
        await c.execute("VACUUM ANALYZE wire_parts")
        seed_s = time.perf_counter() - t0
        before = dict(
            await c.fetch(
                "SELECT relname, pg_total_relation_size(oid) FROM pg_class"
                " WHERE relname IN ('events', 'wire_parts')"
            )
        )
        counts = await c.fetchrow(
            "SELECT (SELECT count(*) FROM events) AS events,"
            " (SELECT count(*) FROM wire_parts) AS parts"
        )
        settings = Settings(database_url=tdb.url)
        pool = await create_pool(tdb.url, min_size=1, max_size=2)
        stop = asyncio.Event()
        lat: list[float] = []
        w = asyncio.create_task(writer(tdb.url, stop, lat))
        await asyncio.sleep(1.0)
        base = list(lat)
        lat.clear()
        t1 = time.perf_counter()
        report = await Janitor(settings, pool).prune_once()
        prune_s = time.perf_counter() - t1
        stop.set()
        await w
        await pool.close()
        after = await c.fetchrow(
            "SELECT (SELECT count(*) FROM events) AS events,"
            " (SELECT count(*) FROM wire_parts) AS parts"
        )
        await c.close()
    batches = (report.wire_logs + report.wire_parts) / settings.janitor_batch_size
    return {
        "seed_seconds": seed_s,
        "rows_before": dict(counts),
        "rows_after": dict(after),
        "bytes_before": before,
        "report": report.as_log(),
        "prune_seconds": prune_s,
        "ms_per_batch": 1000 * prune_s / max(1.0, batches),
        "rows_per_second": (report.wire_logs + report.wire_parts) / prune_s,
        "insert_ms_idle": {"p50": statistics.median(base), "p99": pct(base, 99)},
        "insert_ms_during": {"p50": statistics.median(lat), "p99": pct(lat, 99), "max": max(lat)},
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--loops", type=int, default=2000)
    p.add_argument("--parts", type=int, default=200_000)
    p.add_argument("--wire-share", type=float, default=0.5)
    p.add_argument("--old-share", type=float, default=0.5)
    a = p.parse_args()
    res = asyncio.run(run(a))
    txt = table(
        f"B7 janitor: {res['rows_before']['events']} events, {res['rows_before']['parts']} parts,"
        f" half of them 40 days old",
        [
            "wire logs pruned",
            "parts pruned",
            "seconds",
            "ms / batch of 1000",
            "rows/s",
            "insert p50/p99 ms idle",
            "insert p50/p99/max ms during",
        ],
        [
            [
                res["report"]["wire_logs"],
                res["report"]["wire_parts"],
                res["prune_seconds"],
                res["ms_per_batch"],
                res["rows_per_second"],
                f"{res['insert_ms_idle']['p50']:.2f}/{res['insert_ms_idle']['p99']:.2f}",
                f"{res['insert_ms_during']['p50']:.2f}/{res['insert_ms_during']['p99']:.2f}"
                f"/{res['insert_ms_during']['max']:.1f}",
            ]
        ],
    )
    save("b7_janitor", {"args": vars(a), **res, "table": txt})


if __name__ == "__main__":
    main()

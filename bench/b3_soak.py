"""B3 soak with autovacuum cycles: zero-cost loops, c=16, sync on, default autovacuum
(plus the tables' own settings), sampled every second, reported per 10-s window. 256 loops
are in flight throughout: each ends after 20 tool rounds and a fresh one replaces it.
Target: worst 10-s window ≥ 0.4 × the run's median window. Variant --hold: one idle
REPEATABLE READ transaction holds the xmin horizon from 1/3 to 2/3 of the run.

    python -m bench.b3_soak [--minutes 2 | --minutes 10] [--hold]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from typing import Any

import asyncpg

from agentd.db import pool as dbpool
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from bench import agents, engine_proc
from bench.b1_overhead import seed
from bench.common import Calibration, ThrowawayDB, save, table

ACTIVE = 256  # loops in flight at any time
ROUNDS = 20  # tool rounds per loop: a loop ends after 41 jobs and a fresh one replaces it


async def replenish(url: str, stop: asyncio.Event) -> None:
    """Keep ACTIVE loops running: start a new loop (the public path) for each that ended, so
    the soak measures table churn and autovacuum, not ever-longer histories."""
    pool = await dbpool.create_pool(url, max_size=2)
    lc = Lifecycle(pool, agents.registry(), Settings(log_level="warning"))
    try:
        while not stop.is_set():
            async with pool.acquire() as conn:
                active = await conn.fetchval(
                    "SELECT count(*) FROM loops WHERE status IN ('queued','running','waiting')"
                )
            for _ in range(max(0, ACTIVE - active)):
                await lc.start(agent="zero", message="go")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    finally:
        await pool.close()


async def sizes(db: asyncpg.Connection) -> dict[str, int]:
    rows = await db.fetch(
        "SELECT relname, pg_total_relation_size(relid) AS b FROM pg_stat_user_tables"
        " WHERE relname IN ('jobs','loops','tool_calls','messages','events')"
    )
    return {r["relname"]: int(r["b"]) for r in rows}


async def run(url: str, seconds: float, hold: bool) -> dict[str, Any]:
    db = await asyncpg.connect(url)
    await db.execute("TRUNCATE jobs, loops CASCADE")
    await seed(url, ACTIVE, concurrency=8)
    size0 = await sizes(db)
    stop = asyncio.Event()
    feeder = asyncio.create_task(replenish(url, stop))
    holder = await asyncpg.connect(url)
    settings = Settings(
        database_url=url, log_level="warning", llm_concurrency=16, tool_concurrency=16
    )
    per_s, dead, vac = [], [], []
    tx = None
    released = False
    async with engine_proc.EngineHarness(
        url, settings, llm=agents.ZeroLLM(rounds=ROUNDS), count_rt=False
    ):
        t0 = time.monotonic()
        while (el := time.monotonic() - t0) < seconds:
            if hold and tx is None and el > seconds / 3:
                tx = holder.transaction(isolation="repeatable_read")
                await tx.start()
                await holder.fetchval("SELECT count(*) FROM loops")
            if hold and tx is not None and el > 2 * seconds / 3 and not released:
                await tx.rollback()
                released = True
            s0 = sum(agents.COUNTS.values())
            await asyncio.sleep(1.0)
            per_s.append(sum(agents.COUNTS.values()) - s0)
            r = await db.fetchrow(
                "SELECT sum(n_dead_tup) AS d, max(coalesce(last_autovacuum, 'epoch')) AS v"
                " FROM pg_stat_user_tables WHERE relname IN ('jobs','loops','tool_calls',"
                "'messages')"
            )
            dead.append(int(r["d"] or 0))
            vac.append(str(r["v"]))
    stop.set()
    await feeder
    size1 = await sizes(db)
    await holder.close()
    await db.close()
    windows = [sum(per_s[i : i + 10]) / 10 for i in range(0, len(per_s) - 9, 10)]
    med = statistics.median(windows)
    return {
        "hold": hold,
        "per_s": per_s,
        "dead": dead,
        "windows": windows,
        "median": med,
        "worst": min(windows),
        "ratio": min(windows) / med if med else 0,
        "autovacuums_seen": len(set(vac)) - 1,
        "bytes_before": size0,
        "bytes_after": size1,
    }


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    runs = []
    async with ThrowawayDB("b3") as db:
        c = await asyncpg.connect(db.url)
        autovacuum = await c.fetchval("SHOW autovacuum")
        await c.close()
        if autovacuum != "on":
            print(
                "  WARNING: autovacuum is off on this server: B3 measures bloat without it"
                " (point BENCH_DATABASE_URL at a cluster with default settings)",
                flush=True,
            )
        cal = Calibration(db.url, [(True, 16)], seconds=3)
        cal.run("before")
        for hold in [False, True] if a.hold else [False]:
            runs.append(await run(db.url, a.minutes * 60, hold))
            print(
                f"  B3 hold={hold}: windows {[round(x) for x in runs[-1]['windows']]}", flush=True
            )
        cal.run("after")
    R = cal.R(True, 16)
    rows = [
        [
            "held xmin" if r["hold"] else "control",
            len(r["windows"]),
            r["median"],
            r["median"] / R,
            r["worst"],
            r["ratio"],
            "≥0.4",
            "ok" if r["ratio"] >= 0.4 else "MISS",
            r["autovacuums_seen"],
            max(r["dead"]),
            f"{sum(r['bytes_before'].values()) / 2**20:.0f}→{sum(r['bytes_after'].values()) / 2**20:.0f}",
        ]
        for r in runs
    ]
    out = table(
        f"B3 soak ({a.minutes:g} min, c=16, sync on): worst 10-s window ÷ median",
        [
            "variant",
            "windows",
            "median jobs/s",
            "median÷R(on,16)",
            "worst",
            "worst/median",
            "target",
            "",
            "autovacuum runs",
            "max dead tuples",
            "hot tables MB",
        ],
        rows,
    )

    def chart(ax: Any) -> None:
        for r in runs:
            ax.plot(r["per_s"], label=("held xmin" if r["hold"] else "control") + " jobs/s")
        ax2 = ax.twinx()
        for r in runs:
            ax2.plot(r["dead"], linestyle=":", label="dead tuples")
        ax.set_xlabel("s")
        ax.legend(loc="upper left")

    save(
        "b3_soak",
        {"calibration": cal.as_json(), "autovacuum": autovacuum, "runs": runs, "table": out},
        chart,
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--minutes", type=float, default=2)
    p.add_argument("--hold", action="store_true")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

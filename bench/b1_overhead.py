"""B1 engine overhead + B2 DB overhead per turn, with the zero-cost in-process model/tool.

A "job" is one LLM turn or one tool call (each is a job row). Throughput = jobs/s in the
measured window ÷ R(sync, c) from B0 in the same run. Round trips per job are counted on
the client (every asyncpg exchange, pool-release resets included); commits per job from
pg_stat_database.xact_commit of the throwaway database.

    python -m bench.b1_overhead [--seconds 10] [--warmup 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import asyncpg

from agentd.db import pool as dbpool
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from bench import agents, engine_proc
from bench.common import RT, Calibration, ThrowawayDB, pct, ratio_bar, save, table


async def xact(url: str) -> int:
    c = await asyncpg.connect(url)
    try:
        await c.execute("SELECT pg_stat_force_next_flush()")
        return int(
            await c.fetchval(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            )
        )
    finally:
        await c.close()


async def seed(
    url: str,
    n: int,
    agent: str = "zero",
    state: dict[str, Any] | None = None,
    settings: Settings | None = None,
) -> list[Any]:
    pool = await dbpool.create_pool(url, max_size=4)
    try:
        lc = Lifecycle(pool, agents.registry(), settings or Settings(log_level="warning"))
        return [await lc.start(agent=agent, message="go", state=state or {}) for _ in range(n)]
    finally:
        await pool.close()


async def one(
    url: str, sync: bool, c: int, seconds: float, warmup: float, rounds: int
) -> dict[str, Any]:
    c_db = await asyncpg.connect(url)
    await c_db.execute("TRUNCATE jobs, loops CASCADE")
    await c_db.close()
    n_loops = 64 if c == 1 else 256
    await seed(url, n_loops)
    settings = Settings(
        database_url=url, log_level="warning", llm_concurrency=c, tool_concurrency=c
    )
    engine_proc.LAT["llm"].clear()
    engine_proc.LAT["tool"].clear()
    async with engine_proc.EngineHarness(url, settings, llm=agents.ZeroLLM(rounds=rounds)):
        await asyncio.sleep(warmup)
        x0, rt0, j0, cm0 = await xact(url), RT.total, sum(agents.COUNTS.values()), RT.commits
        by0 = RT.by.copy()
        l0 = agents.COUNTS["llm"]
        lat0 = (len(engine_proc.LAT["llm"]), len(engine_proc.LAT["tool"]))
        t0 = time.perf_counter()
        series = []
        for _ in range(int(seconds)):
            s0 = sum(agents.COUNTS.values())
            await asyncio.sleep(1.0)
            series.append(sum(agents.COUNTS.values()) - s0)
        dt = time.perf_counter() - t0
        jobs = sum(agents.COUNTS.values()) - j0
        rts = RT.total - rt0
        cms = RT.commits - cm0
        by = RT.by - by0
        x1 = await xact(url)
        llm_lat = engine_proc.LAT["llm"][lat0[0] :]
        tool_lat = engine_proc.LAT["tool"][lat0[1] :]
    return {
        "sync": sync,
        "c": c,
        "jobs": jobs,
        "seconds": dt,
        "jobs_per_s": jobs / dt,
        "llm_turns_per_s": (agents.COUNTS["llm"] - l0) / dt,
        "rt_per_job": rts / max(jobs, 1),
        "commits_per_job": cms / max(jobs, 1),
        "pg_xacts_per_job": (x1 - x0) / max(jobs, 1),
        "rt_breakdown_per_job": {k: v / max(jobs, 1) for k, v in by.most_common(25)},
        "series": series,
        "llm_lat": llm_lat,
        "tool_lat": tool_lat,
    }


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    async with ThrowawayDB("b1") as db:
        combos = [(True, 1), (True, 16), (False, 1), (False, 16)]
        cal = Calibration(db.url, combos, seconds=a.b0_seconds)
        cal.run("before")
        runs = []
        for sync in (True, False):
            await db.set_sync(sync)
            for c in (1, 16):
                r = await one(db.url, sync, c, a.seconds, a.warmup, a.rounds)
                runs.append(r)
                print(
                    f"  B1 sync={'on' if sync else 'off'} c={c}: {r['jobs_per_s']:.0f} jobs/s,"
                    f" {r['rt_per_job']:.1f} RT/job, {r['commits_per_job']:.2f} commits/job",
                    flush=True,
                )
        await db.set_sync(True)
        cal.run("after")
    L = cal.L(True)
    targets = {(True, 1): 0.40, (True, 16): 0.25, (False, 16): 0.12, (False, 1): None}
    rows = []
    for r in runs:
        R = cal.R(r["sync"], r["c"])
        r["R"] = R
        r["ratio"] = r["jobs_per_s"] / R
        t = targets[(r["sync"], r["c"])]
        rows.append(
            [
                f"{'on' if r['sync'] else 'off'}/{r['c']}",
                r["jobs_per_s"],
                R,
                r["ratio"],
                t if t is not None else "-",
                "ok" if t is None or r["ratio"] >= t else "MISS",
                r["llm_turns_per_s"],
                r["rt_per_job"],
                r["commits_per_job"],
            ]
        )
    out = table(
        "B1 engine overhead (zero model/tool): jobs/s ÷ R(sync,c)",
        ["sync/c", "jobs/s", "R", "ratio", "target", "", "llm turns/s", "RT/job", "commits/job"],
        rows,
    )
    b2 = next(r for r in runs if r["sync"] and r["c"] == 1)
    b2rows = []
    for q in ("llm", "tool"):
        xs = b2[f"{q}_lat"]
        p50, p99 = pct(xs, 50), pct(xs, 99)
        b2rows.append(
            [
                q,
                len(xs),
                p50 * 1e3,
                p99 * 1e3,
                L * 1e3,
                p50 / L,
                "≤2.5",
                "ok" if p50 / L <= 2.5 else "MISS",
                p99 / L,
                "≤5",
                "ok" if p99 / L <= 5 else "MISS",
            ]
        )
    out += "\n" + table(
        "B2 DB overhead per job (claim start → finalize commit), sync on, c=1",
        ["job", "n", "p50 ms", "p99 ms", "L ms", "p50/L", "target", "", "p99/L", "target", ""],
        b2rows,
    )
    top = b2["rt_breakdown_per_job"]
    out += "\n" + table(
        "Round trips per job by statement (sync on, c=1)",
        ["statement", "per job"],
        [[k, v] for k, v in top.items()],
    )
    for r in runs:
        r["llm_lat_p50"], r["llm_lat_p99"] = pct(r["llm_lat"], 50), pct(r["llm_lat"], 99)
        r["tool_lat_p50"], r["tool_lat_p99"] = pct(r["tool_lat"], 50), pct(r["tool_lat"], 99)
        r.pop("llm_lat"), r.pop("tool_lat")

    def chart(ax: Any) -> None:
        ratio_bar(
            ax,
            [f"{'on' if r['sync'] else 'off'}/{r['c']}" for r in runs],
            [r["ratio"] for r in runs],
            [targets[(r["sync"], r["c"])] for r in runs],
        )

    save(
        "b1_overhead",
        {"calibration": cal.as_json(), "L_s": L, "runs": runs, "b2": b2rows, "table": out},
        chart,
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--warmup", type=float, default=3)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--b0-seconds", type=float, default=5)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

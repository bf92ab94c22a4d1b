"""B1e end to end: agentd loops against FakeLLM and fake_mcp (separate processes, HTTP),
compared in the same run with the bare loop (same client code and fakes, no DB/engine).
Ratio = agentd jobs/s ÷ bare jobs/s at the same concurrency. Target ≥ 0.5.

    python -m bench.b1e_e2e [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import asyncpg

from agentd.settings import Settings
from bench import engine_proc, workload
from bench.b1_overhead import seed
from bench.common import Calibration, ThrowawayDB, fake_llm, fake_mcp, ratio_bar, save, table


async def agentd_throughput(
    url: str, llm_url: str, mcp_url: str, c: int, seconds: float, warmup: float
) -> dict[str, Any]:
    db = await asyncpg.connect(url)
    await db.execute("TRUNCATE jobs, loops CASCADE")
    # Enough loops that none of the c workers runs dry within warmup + window (each loop
    # is 4 jobs: LLM, 2 tools, LLM); a drained run would understate jobs/s.
    n = 2000
    await seed(url, n, agent="http", state={"llm": llm_url, "mcp": mcp_url}, concurrency=8)
    settings = Settings(
        database_url=url, log_level="warning", llm_concurrency=c, tool_concurrency=c
    )
    async with engine_proc.EngineHarness(url, settings, count_rt=False):
        await asyncio.sleep(warmup)
        q = "SELECT count(*) FROM messages WHERE role IN ('assistant', 'tool')"
        l0, t0 = await db.fetchval(q), time.perf_counter()
        await asyncio.sleep(seconds)
        l1, dt = await db.fetchval(q), time.perf_counter() - t0
        left = await db.fetchval("SELECT count(*) FROM loops WHERE status <> 'completed'")
        if left == 0:
            print("  WARNING: every loop finished inside the window: jobs/s understated")
        failed = await db.fetchval("SELECT count(*) FROM loops WHERE status = 'failed'")
    await db.close()
    return {"jobs_per_s": (l1 - l0) / dt, "not_done_at_end": left, "failed": failed, "seeded": n}


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    llm = fake_llm(workload.rules())
    mcp = fake_mcp()
    llm_url, mcp_url = f"http://127.0.0.1:{llm.port}", f"http://127.0.0.1:{mcp.port}/mcp"
    runs = []
    try:
        async with ThrowawayDB("b1e") as db:
            cal = Calibration(db.url, [(True, 1), (True, 16)], seconds=a.b0_seconds)
            cal.run("before")
            for c in (1, 16):
                bare = await workload.bare_throughput(llm_url, mcp_url, c, a.seconds, a.warmup)
                ours = await agentd_throughput(db.url, llm_url, mcp_url, c, a.seconds, a.warmup)
                runs.append(
                    {
                        "c": c,
                        "bare": bare,
                        "agentd": ours,
                        "ratio": ours["jobs_per_s"] / bare["jobs_per_s"],
                    }
                )
                print(
                    f"  B1e c={c}: agentd {ours['jobs_per_s']:.0f} jobs/s vs bare "
                    f"{bare['jobs_per_s']:.0f} → {runs[-1]['ratio']:.2f}",
                    flush=True,
                )
            cal.run("after")
    finally:
        llm.stop()
        mcp.stop()
    rows = [
        [
            r["c"],
            r["agentd"]["jobs_per_s"],
            r["bare"]["jobs_per_s"],
            r["ratio"],
            "≥0.5",
            "ok" if r["ratio"] >= 0.5 else "MISS",
            r["agentd"]["jobs_per_s"] / cal.R(True, r["c"]),
            r["agentd"]["failed"],
        ]
        for r in runs
    ]
    out = table(
        "B1e end to end (FakeLLM + fake MCP over HTTP): agentd ÷ bare loop",
        [
            "c",
            "agentd jobs/s",
            "bare jobs/s",
            "ratio",
            "target",
            "",
            "agentd ÷ R(on,c)",
            "failed loops",
        ],
        rows,
    )

    def chart(ax: Any) -> None:
        ratio_bar(ax, [f"c={r['c']}" for r in runs], [r["ratio"] for r in runs], [0.5] * len(runs))

    save("b1e_e2e", {"calibration": cal.as_json(), "runs": runs, "table": out}, chart)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--warmup", type=float, default=3)
    p.add_argument("--b0-seconds", type=float, default=5)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

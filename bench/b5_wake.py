"""B5 wake latency: an idle worker process (llm_concurrency 16, zero model) and a separate
enqueuer; each loop start commits (with NOTIFY), then the worker claims it. Metric:
enqueue-commit returned (enqueuer) → claim returned (worker), both CLOCK_REALTIME on this
host. Target p50 ≤ 2·L + 1 ms, p99 ≤ 5·L + 5 ms.

    python -m bench.b5_wake [--n 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from typing import Any

from agentd.db import pool as dbpool
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from bench import agents
from bench.common import PY, Calibration, Proc, ThrowawayDB, pct, save, table


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    stats = tempfile.mktemp(suffix=".jsonl")
    sent: dict[str, float] = {}
    async with ThrowawayDB("b5") as db:
        cal = Calibration(db.url, [(True, 1)], seconds=3)
        cal.run("before")
        w = Proc(
            [
                PY,
                "-m",
                "bench.engine_proc",
                "--url",
                db.url,
                "--llm",
                "zero",
                "--settings",
                json.dumps({"llm_concurrency": 16, "tool_concurrency": 16}),
                "--stats",
                stats,
            ]
        ).start()
        pool = await dbpool.create_pool(db.url, max_size=2)
        lc = Lifecycle(pool, agents.registry(), Settings(log_level="warning"))
        await asyncio.sleep(2)
        for _ in range(a.n):
            loop = await lc.start(agent="zero", message="go")
            sent[str(loop.id)] = time.time()
            await asyncio.sleep(a.gap)
        await asyncio.sleep(2.5)
        w.stop()
        await pool.close()
        cal.run("after")
    claimed: dict[str, float] = {}
    with open(stats) as f:
        for line in f:
            for lid, t in json.loads(line)["wake"]:
                claimed.setdefault(lid, t)
    lat = [claimed[k] - v for k, v in sent.items() if k in claimed][10:]
    L = cal.L(True)
    p50, p99 = pct(lat, 50), pct(lat, 99)
    rows = [
        [
            "enqueue→claimed",
            len(lat),
            p50 * 1e3,
            p99 * 1e3,
            L * 1e3,
            p50 / (2 * L + 0.001),
            "≤1",
            "ok" if p50 <= 2 * L + 0.001 else "MISS",
            p99 / (5 * L + 0.005),
            "≤1",
            "ok" if p99 <= 5 * L + 0.005 else "MISS",
            p50 / L,
        ]
    ]
    out = table(
        "B5 wake latency (NOTIFY, separate processes)",
        [
            "what",
            "n",
            "p50 ms",
            "p99 ms",
            "L ms",
            "p50/(2L+1ms)",
            "target",
            "",
            "p99/(5L+5ms)",
            "target",
            "",
            "p50/L",
        ],
        rows,
    )

    def chart(ax: Any) -> None:
        ax.hist([x * 1e3 for x in lat], bins=50)
        ax.axvline((2 * L + 0.001) * 1e3, color="k", linestyle="--")
        ax.set_xlabel("enqueue commit → claimed (ms); dashed = 2L+1ms")

    save(
        "b5_wake",
        {
            "calibration": cal.as_json(),
            "L_s": L,
            "lat_s": lat,
            "table": out,
            "missing": len(sent) - len([k for k in sent if k in claimed]),
        },
        chart,
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--gap", type=float, default=0.01)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

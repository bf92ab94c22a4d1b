"""B6 heartbeat cost + 1,000 concurrent streams through ONE worker process.

1,000 loops stream from a slow FakeLLM (tokens trickling for --stream-seconds) through one
engine process (llm_concurrency 1000, default pool, default heartbeat). Measured: peak DB
connections of the database (pg_stat_activity), peak worker RSS, event-loop lag, all loops
completing; the heartbeat's time per tick and its share of wall time, and the HOT ratio of
`loops` updates in the window where only heartbeats touch `loops` (everyone is streaming).

    python -m bench.b6_streams [--loops 1000] [--stream-seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from typing import Any

import asyncpg

from agentd.settings import Settings
from bench.b1_overhead import seed
from bench.common import PY, Calibration, Proc, ThrowawayDB, fake_llm, pct, save, table


async def hot(db: asyncpg.Connection) -> tuple[int, int]:
    r = await db.fetchrow(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'loops'"
    )
    return int(r[0]), int(r[1])


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    chunks = int(a.stream_seconds / a.chunk_delay)
    llm = fake_llm(
        [
            {
                "match": None,
                "reply": {
                    "content": "t" * (8 * chunks),
                    "chunk_size": 8,
                    "chunk_delay": a.chunk_delay,
                },
            }
        ]
    )
    stats = tempfile.mktemp(suffix=".jsonl")
    conns: list[dict[str, int]] = []
    s = Settings()
    try:
        async with ThrowawayDB("b6") as tdb:
            cal = Calibration(tdb.url, [(True, 1)], seconds=3)
            cal.run("before")
            # Seeded with the worker's settings: a turn's first lease comes from its job.
            await seed(
                tdb.url,
                a.loops,
                agent="http",
                state={"llm": f"http://127.0.0.1:{llm.port}", "stream": True},
                settings=Settings(log_level="warning", **json.loads(a.settings or "{}")),
            )
            db = await asyncpg.connect(tdb.url)
            overrides = {"llm_concurrency": a.loops, **json.loads(a.settings or "{}")}
            w = Proc(
                [
                    PY,
                    "-m",
                    "bench.engine_proc",
                    "--url",
                    tdb.url,
                    "--llm",
                    "http",
                    "--settings",
                    json.dumps(overrides),
                    "--stats",
                    stats,
                ]
            ).start()
            t0 = time.monotonic()
            hot0 = hot1 = None
            t_hot0 = t_hot1 = 0.0
            done = 0
            while time.monotonic() - t0 < a.stream_seconds * 3 + 30:
                rows = await db.fetch(
                    "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname ="
                    " current_database() AND pid <> pg_backend_pid() GROUP BY 1"
                )
                conns.append({r[0]: r[1] for r in rows})
                el = time.monotonic() - t0
                # The HOT window opens once every loop is claimed and streaming: from then
                # on only heartbeats update `loops` (a claim's status change is never HOT).
                running = await db.fetchval("SELECT count(*) FROM loops WHERE status = 'running'")
                if hot0 is None and running >= a.loops:
                    await db.execute("SELECT pg_stat_force_next_flush()")
                    hot0, t_hot0 = await hot(db), el
                if hot0 is not None and hot1 is None and el > a.stream_seconds * 0.9:
                    await db.execute("SELECT pg_stat_force_next_flush()")
                    hot1, t_hot1 = await hot(db), el
                done = await db.fetchval(
                    "SELECT count(*) FROM loops WHERE status IN ('completed','failed','paused')"
                )
                if done >= a.loops:
                    break
                await asyncio.sleep(0.5)
            wall = time.monotonic() - t0
            statuses = dict(await db.fetch("SELECT status, count(*) FROM loops GROUP BY 1"))
            w.stop()
            await db.close()
            cal.run("after")
    finally:
        llm.stop()
    recs = [json.loads(x) for x in open(stats)]
    lag = [x for r in recs for x in r["lag"]]
    renew = [x for r in recs for x in r["renew"]]
    rss = max(r["rss"] for r in recs) / 2**20
    inflight = max(r["in_flight"] for r in recs)
    peak = max(sum(c.values()) for c in conns)
    peak_by = max(conns, key=lambda c: sum(c.values()))
    hot_ratio = None
    if hot0 and hot1 and hot1[0] > hot0[0]:
        hot_ratio = (hot1[1] - hot0[1]) / (hot1[0] - hot0[0])
    hb_share = sum(renew) / wall
    L = cal.L(True)
    rows = [
        ["peak DB connections", peak, 12, "ok" if peak <= 12 else "MISS", json.dumps(peak_by)],
        ["peak RSS MB", rss, 500, "ok" if rss <= 500 else "MISS", f"in-flight peak {inflight}"],
        [
            "loop lag p99 ms",
            pct(lag, 99) * 1e3,
            100,
            "ok" if pct(lag, 99) <= 0.1 else "MISS",
            f"p50 {pct(lag, 50) * 1e3:.1f} ms, max {max(lag) * 1e3:.0f} ms",
        ],
        [
            "completed",
            statuses.get("completed", 0),
            a.loops,
            "ok" if statuses.get("completed", 0) == a.loops else "MISS",
            json.dumps(statuses),
        ],
        [
            "heartbeat time / wall",
            hb_share,
            0.01,
            "ok" if hb_share < 0.01 else "MISS",
            f"{len(renew)} ticks, p50 {pct(renew, 50) * 1e3:.1f} ms = {pct(renew, 50) / L:.1f}·L",
        ],
        [
            "HOT ratio (loops, heartbeat window)",
            hot_ratio,
            0.9,
            "ok" if hot_ratio is not None and hot_ratio >= 0.9 else "MISS",
            f"window {t_hot0:.0f}-{t_hot1:.0f} s, upd {hot1[0] - hot0[0] if hot0 and hot1 else 0}",
        ],
        [
            "wall s (all done)",
            wall,
            a.stream_seconds,
            "-",
            f"wall/stream = {wall / a.stream_seconds:.2f}",
        ],
    ]
    out = table(
        f"B6 + {a.loops} concurrent streams through one worker "
        f"(heartbeat {s.heartbeat_interval}s, pool max {s.db_pool_max})",
        ["metric", "value", "target", "", "note"],
        rows,
    )

    def chart(ax: Any) -> None:
        ts = [r["t"] - recs[0]["t"] for r in recs]
        ax.plot(ts, [r["rss"] / 2**20 for r in recs], label="RSS MB")
        ax.plot(ts, [max(r["lag"] or [0]) * 1e3 for r in recs], label="max lag ms / s")
        ax.plot(ts, [r["in_flight"] / 10 for r in recs], label="in-flight / 10")
        ax.set_xlabel("s")
        ax.legend()

    save(
        "b6_streams",
        {
            "calibration": cal.as_json(),
            "rows": rows,
            "conns": conns,
            "renew_s": renew,
            "table": out,
        },
        chart,
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--loops", type=int, default=1000)
    p.add_argument("--stream-seconds", type=float, default=30)
    p.add_argument("--chunk-delay", type=float, default=0.5)
    p.add_argument("--settings", help="JSON Settings overrides for the worker")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

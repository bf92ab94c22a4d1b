"""Side by side with DBOS Transact: the same loop (LLM step → 2 parallel tool steps → LLM
step; same FakeLLM/fake_mcp over HTTP; same agentd client code) on agentd and on DBOS
(queue polling 0.05 s, worker_concurrency 16), same PostgreSQL, same run. Each side runs
as one worker process. Metrics: steps/s (LLM + tool steps) ratio, and recovery after
SIGKILL of the worker holding the work while another worker is alive.

    python -m bench.b10_dbos [--seconds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
import uuid
from typing import Any

import asyncpg

from bench import workload
from bench.b1_overhead import seed
from bench.common import (
    ADMIN_URL,
    PY,
    Calibration,
    Proc,
    ThrowawayDB,
    admin,
    fake_llm,
    fake_mcp,
    ratio_bar,
    save,
    table,
    with_db,
)

SLOW = 3.0
RULES = [
    {"match": {"role": "tool"}, "reply": {"content": "done"}},
    {
        "match": {"contains": "slow"},
        "reply": {
            "delay_before_first_byte": SLOW,
            "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}],
        },
    },
    *workload.rules()[1:],
]


async def rate(db: asyncpg.Connection, q: str, seconds: float, warmup: float) -> float:
    await asyncio.sleep(warmup)
    a, t0 = await db.fetchval(q), time.perf_counter()
    await asyncio.sleep(seconds)
    return (await db.fetchval(q) - a) / (time.perf_counter() - t0)


async def poll(check: Any, timeout: float, every: float = 0.01) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = await check()
        if v:
            return v
        await asyncio.sleep(every)
    return None


def agentd_worker(url: str) -> Proc:
    return Proc(
        [
            PY,
            "-m",
            "bench.engine_proc",
            "--url",
            url,
            "--llm",
            "http",
            "--settings",
            json.dumps({"llm_concurrency": 16, "tool_concurrency": 16}),
        ]
    ).start()


def dbos_worker(
    url: str, llm: str, mcp: str, executor: str, seed_n: int = 0, prompt: str = "go"
) -> Proc:
    return Proc(
        [
            PY,
            "-m",
            "bench.dbos_app",
            "--url",
            url,
            "--llm",
            llm,
            "--mcp",
            mcp,
            "--executor",
            executor,
            "--seed",
            str(seed_n),
            "--prompt",
            prompt,
        ]
    ).start(60)


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    llm, mcp = fake_llm(RULES), fake_mcp()
    llm_url, mcp_url = f"http://127.0.0.1:{llm.port}", f"http://127.0.0.1:{mcp.port}/mcp"
    dbos_db = f"bench_dbos_{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {}
    try:
        async with ThrowawayDB("b10") as tdb, admin() as adm:
            await adm.execute(f'CREATE DATABASE "{dbos_db}"')
            durl = with_db(ADMIN_URL, dbos_db)
            cal = Calibration(tdb.url, [(True, 1), (True, 16)], seconds=3)
            cal.run("before")
            db = await asyncpg.connect(tdb.url)
            # --- throughput: agentd
            await seed(tdb.url, a.loops, agent="http", state={"llm": llm_url, "mcp": mcp_url})
            w = agentd_worker(tdb.url)
            ours = await rate(
                db,
                "SELECT count(*) FROM messages WHERE role IN ('assistant','tool')",
                a.seconds,
                a.warmup,
            )
            w.stop()
            # --- throughput: DBOS
            d = dbos_worker(durl, llm_url, mcp_url, "T", seed_n=a.loops)
            ddb = await asyncpg.connect(durl)
            theirs = await rate(
                ddb,
                "SELECT count(*) FROM dbos.operation_outputs WHERE"
                " function_name NOT LIKE '%discover%'",
                a.seconds,
                a.warmup,
            )
            d.stop()
            await ddb.execute("DELETE FROM dbos.workflow_status")
            print(f"  throughput: agentd {ours:.1f} steps/s, DBOS {theirs:.1f} steps/s", flush=True)
            out["throughput"] = {
                "agentd_steps_per_s": ours,
                "dbos_steps_per_s": theirs,
                "ratio": ours / theirs if theirs else None,
            }
            # --- recovery: agentd (two workers, kill the one holding the slow turn)
            await db.execute("TRUNCATE jobs, loops CASCADE")
            w1, w2 = agentd_worker(tdb.url), agentd_worker(tdb.url)
            await asyncio.sleep(1)
            rec_a = []
            for _ in range(a.n):
                (lp,) = await seed(tdb.url, 1, agent="http", state={"llm": llm_url, "mcp": mcp_url})
                await db.execute("UPDATE messages SET content = 'slow' WHERE loop_id = $1", lp.id)
                row = await poll(
                    lambda: db.fetchrow(
                        "SELECT l.worker_id, w.pid FROM loops l JOIN workers w ON w.id = l.worker_id"
                        " WHERE l.id = $1",
                        lp.id,
                    ),
                    10,
                )
                victim = w1 if row["pid"] == w1.pid else w2
                t0 = time.monotonic()
                os.kill(victim.pid, signal.SIGKILL)
                ok = await poll(
                    lambda: db.fetchval(
                        "SELECT 1 FROM loops WHERE id = $1 AND worker_id IS NOT NULL AND"
                        " worker_id <> $2",
                        lp.id,
                        row["worker_id"],
                    ),
                    30,
                )
                rec_a.append(time.monotonic() - t0 if ok else None)
                victim.p.wait()
                fresh = agentd_worker(tdb.url)
                w1, w2 = (fresh, w2) if victim is w1 else (w1, fresh)
                await asyncio.sleep(1)
            w1.stop()
            w2.stop()
            # --- recovery: DBOS (A holds the slow workflow, B alive; then A restarts)
            rec_d, rec_d_restart = [], []
            procs = {"B": dbos_worker(durl, llm_url, mcp_url, "B")}
            for i in range(a.n):
                procs["A"] = dbos_worker(durl, llm_url, mcp_url, "A", seed_n=1, prompt="slow")
                row = await poll(
                    lambda: ddb.fetchrow(
                        "SELECT workflow_uuid, executor_id, recovery_attempts FROM"
                        " dbos.workflow_status WHERE status = 'PENDING' AND queue_name = 'agents'"
                        " AND executor_id IN ('A','B')"
                    ),
                    10,
                )
                ex = row["executor_id"]
                t0 = time.monotonic()
                os.kill(procs[ex].pid, signal.SIGKILL)
                procs[ex].p.wait()
                wid = row["workflow_uuid"]
                ok = await poll(
                    lambda: ddb.fetchval(
                        "SELECT 1 FROM dbos.workflow_status WHERE workflow_uuid = $1 AND"
                        " (status = 'SUCCESS' OR executor_id <> $3 OR recovery_attempts > $2)",
                        wid,
                        row["recovery_attempts"],
                        ex,
                    ),
                    a.dbos_wait,
                )
                rec_d.append(time.monotonic() - t0 if ok else None)
                procs[ex] = dbos_worker(durl, llm_url, mcp_url, ex)
                if not ok:
                    ok2 = await poll(
                        lambda: ddb.fetchval(
                            "SELECT 1 FROM dbos.workflow_status WHERE workflow_uuid = $1 AND"
                            " (status = 'SUCCESS' OR recovery_attempts > $2)",
                            wid,
                            row["recovery_attempts"],
                        ),
                        30,
                    )
                    rec_d_restart.append(time.monotonic() - t0 if ok2 else None)
                await poll(
                    lambda: ddb.fetchval(
                        "SELECT 1 FROM dbos.workflow_status WHERE"
                        " workflow_uuid = $1 AND status='SUCCESS'",
                        wid,
                    ),
                    15,
                )
                procs.pop("A").stop()
                print(
                    f"  recovery trial {i}: agentd {rec_a[i]}, DBOS by live worker "
                    f"{rec_d[-1]}, DBOS after restarting the killed executor "
                    f"{rec_d_restart[-1:]} ",
                    flush=True,
                )
            for pr in procs.values():
                pr.stop()
            await ddb.close()
            await db.close()
            cal.run("after")
            await adm.execute(f'DROP DATABASE IF EXISTS "{dbos_db}" WITH (FORCE)')
    finally:
        llm.stop()
        mcp.stop()
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
    ra = [x for x in rec_a if x is not None]
    rd = [x for x in rec_d if x is not None]
    rr = [x for x in rec_d_restart if x is not None]
    out["recovery"] = {
        "agentd_s": rec_a,
        "dbos_live_worker_s": rec_d,
        "dbos_after_restart_s": rec_d_restart,
        "dbos_wait_s": a.dbos_wait,
    }
    t = out["throughput"]
    rows = [
        [
            "steps/s (LLM+tool)",
            t["agentd_steps_per_s"],
            t["dbos_steps_per_s"],
            t["ratio"],
            "≥3",
            "ok" if (t["ratio"] or 0) >= 3 else "MISS",
        ],
        [
            "steps/s ÷ R(on,16)",
            t["agentd_steps_per_s"] / cal.R(True, 16),
            t["dbos_steps_per_s"] / cal.R(True, 16),
            "-",
            "-",
            "",
        ],
        [
            "recovery by another live worker, median s",
            med(ra),
            med(rd) if rd else f"none in {a.dbos_wait:g}s ({len(rd)}/{len(rec_d)})",
            (med(rd) / med(ra)) if rd and ra else "-",
            "-",
            "",
        ],
        [
            "DBOS: recovery when the killed executor restarts, median s",
            "-",
            med(rr),
            "-",
            "-",
            f"{len(rr)}/{len(rec_d_restart)}",
        ],
    ]
    txt = table(
        "Side by side: agentd vs DBOS Transact (queue polling 0.05 s, concurrency 16)",
        ["metric", "agentd", "DBOS", "agentd÷DBOS", "target", ""],
        rows,
    )

    def chart(ax: Any) -> None:
        ratio_bar(ax, ["throughput agentd÷DBOS"], [t["ratio"] or 0], [3])

    save("b10_dbos", {"calibration": cal.as_json(), **out, "table": txt}, chart)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--warmup", type=float, default=5)
    p.add_argument("--loops", type=int, default=400)
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--dbos-wait", type=float, default=20)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

"""B1 engine overhead + B2 DB overhead per turn, with the zero-cost in-process model/tool.

A "job" is one LLM turn or one tool call (each is a job row). Throughput = jobs/s in the
measured window ÷ R(sync, c) from B0 in the same run. Round trips per job are counted on
the client (every asyncpg exchange, pool-release resets included); commits per job from
pg_stat_database.xact_commit of the throwaway database.

Next to each agentd measurement (same sync mode, concurrency and duration) the bare
asyncpg patterns of the reference prototype run in the same database (`bench.baseline`:
"2tx" = claim + fenced CTE, "chain" = chained continuation). agentd ÷ 2tx is the
regime-independent figure: what our Python costs beside the bare 2-commit design.

Seeding: `--loops` loops (2,000, as the spec's B1), each started through `Lifecycle.start`
with one job; `--rounds` tool rounds per loop (2·rounds + 1 jobs) is chosen by default so
the seeded work is ≥ 3× what an engine doing EXPECTED_JOBS_PER_S could finish in
warmup + measure. A run whose queue emptied, or one with a 1-s window below half the median,
is flagged `"drained": true`. A loop's first LLM turn does one-off work (MCP session, tool
listing), and with 2,000 loops at a few hundred jobs/s a 3 s warmup + 10 s window would see
almost nothing but first turns; so the warmup is extended (`--prime-max`, default up to
120 s; 0 = off) until every loop has had its first turn. "1st turns" = the share of the
window's LLM turns that were a loop's first.

    python -m bench.b1_overhead [--seconds 10] [--warmup 3] [--loops 2000] [--rounds N]
                                [--prime-max 120] [--b0-seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import math
import subprocess
import time
from typing import Any

import asyncpg

from agentd.db import pool as dbpool
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from bench import agents, baseline, engine_proc
from bench.common import ROOT, RT, Calibration, ThrowawayDB, pct, ratio_bar, save, table

#: Headroom for the default --rounds: seeded jobs >= 3 x this x (warmup + seconds).
EXPECTED_JOBS_PER_S = 2000
#: The reference doc's §3.2 prototype, ratio to R (medians): for comparison only.
DOC_2TX = {(True, 1): 0.45, (True, 16): 0.28, (False, 1): 0.11, (False, 16): 0.16}
DOC_CHAIN = {(True, 1): 0.91, (True, 16): 0.54, (False, 1): 0.28, (False, 16): 0.26}


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
    concurrency: int = 1,
) -> list[Any]:
    """`n` loops through `Lifecycle.start` (the public path); `concurrency` > 1 runs that
    many starts at a time (asyncio.gather in batches) over as many pooled connections."""
    pool = await dbpool.create_pool(url, max_size=max(4, concurrency))
    try:
        lc = Lifecycle(pool, agents.registry(), settings or Settings(log_level="warning"))

        async def start() -> Any:
            return await lc.start(agent=agent, message="go", state=state or {})

        out: list[Any] = []
        while len(out) < n:
            k = min(concurrency, n - len(out))
            out += await asyncio.gather(*(start() for _ in range(k)))
        return out
    finally:
        await pool.close()


def default_rounds(loops: int, seconds: float, warmup: float) -> int:
    """Tool rounds per loop so the seeded jobs are ≥ 3× EXPECTED_JOBS_PER_S's worth (plus
    the priming: every loop's first LLM turn and tool call)."""
    need = 3 * (EXPECTED_JOBS_PER_S * (warmup + seconds) + 2 * loops)
    return max(5, math.ceil((need / loops - 1) / 2))


class FirstTurnLLM(agents.ZeroLLM):
    """ZeroLLM that also counts each loop's first turn (no assistant message yet): a loop's
    first turn does one-off work (MCP session, tool listing) that later turns don't."""

    def __init__(self, rounds: int, loops: int) -> None:
        super().__init__(rounds=rounds)
        self.first = 0
        self.loops = loops
        self.primed = asyncio.Event()  # set once every loop has had its first turn

    async def complete(self, request: Any, **kw: Any) -> Any:
        if not any(m.role == "assistant" for m in request.messages):
            self.first += 1
            if self.first >= self.loops:
                self.primed.set()
        return await super().complete(request, **kw)


async def queue_depth(conn: asyncpg.Connection) -> tuple[int, int]:
    r = await conn.fetchrow(
        "SELECT count(*) FILTER (WHERE queue = 'llm') AS llm,"
        " count(*) FILTER (WHERE queue = 'tool') AS tool FROM jobs"
    )
    return int(r["llm"]), int(r["tool"])


async def one(
    url: str,
    sync: bool,
    c: int,
    seconds: float,
    warmup: float,
    rounds: int,
    loops: int,
    prime_max: float = 0,
) -> dict[str, Any]:
    """One agentd measurement. With `prime_max` > 0 the warmup also lasts (up to that many
    seconds) until every loop has had its first LLM turn, so the window sees later turns."""
    c_db = await asyncpg.connect(url)
    await c_db.execute("TRUNCATE jobs, loops CASCADE")
    t = time.perf_counter()
    await seed(url, loops, concurrency=8)
    seed_s = time.perf_counter() - t
    settings = Settings(
        database_url=url, log_level="warning", llm_concurrency=c, tool_concurrency=c
    )
    engine_proc.LAT["llm"].clear()
    engine_proc.LAT["tool"].clear()
    llm = FirstTurnLLM(rounds, loops)
    try:
        async with engine_proc.EngineHarness(url, settings, llm=llm):
            t = time.perf_counter()
            await asyncio.sleep(warmup)
            if prime_max > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(llm.primed.wait(), prime_max)
            warm_s = time.perf_counter() - t
            f0 = llm.first
            x0, rt0, j0, cm0 = await xact(url), RT.total, sum(agents.COUNTS.values()), RT.commits
            by0 = RT.by.copy()
            l0 = agents.COUNTS["llm"]
            lat0 = (len(engine_proc.LAT["llm"]), len(engine_proc.LAT["tool"]))
            depth = [await queue_depth(c_db)]
            t0 = time.perf_counter()
            series = []
            for _ in range(int(seconds)):
                s0 = sum(agents.COUNTS.values())
                await asyncio.sleep(1.0)
                series.append(sum(agents.COUNTS.values()) - s0)
                depth.append(await queue_depth(c_db))
            dt = time.perf_counter() - t0
            firsts = llm.first - f0
            llm_turns = agents.COUNTS["llm"] - l0
            jobs = sum(agents.COUNTS.values()) - j0
            rts = RT.total - rt0
            cms = RT.commits - cm0
            by = RT.by - by0
            x1 = await xact(url)
            llm_lat = engine_proc.LAT["llm"][lat0[0] :]
            tool_lat = engine_proc.LAT["tool"][lat0[1] :]
        # Leave the bare patterns that run next a quiet database.
        await c_db.execute("TRUNCATE jobs, loops CASCADE")
    finally:
        await c_db.close()
    llm_empty = min(d[0] for d in depth) == 0
    dipped = baseline.dips(series)
    return {
        "sync": sync,
        "c": c,
        "loops": loops,
        "rounds": rounds,
        "seeded_jobs": loops * (2 * rounds + 1),
        "seed_seconds": seed_s,
        "warmup_seconds": warm_s,
        "primed": f0 >= loops,
        "first_turn_share": firsts / max(llm_turns, 1),
        "jobs": jobs,
        "seconds": dt,
        "jobs_per_s": jobs / dt,
        "llm_turns_per_s": llm_turns / dt,
        "rt_per_job": rts / max(jobs, 1),
        "commits_per_job": cms / max(jobs, 1),
        "pg_xacts_per_job": (x1 - x0) / max(jobs, 1),
        "rt_breakdown_per_job": {k: v / max(jobs, 1) for k, v in by.most_common(25)},
        "series": series,
        "queue_depth": [{"llm": d[0], "tool": d[1]} for d in depth],
        "llm_queue_emptied": llm_empty,
        "window_below_half_median": dipped,
        "drained": llm_empty or dipped,
        "llm_lat": llm_lat,
        "tool_lat": tool_lat,
    }


def sc(sync: bool, c: int) -> str:
    return f"{'on' if sync else 'off'}/{c}"


def provenance() -> dict[str, Any]:
    """What was measured: the commit, uncommitted engine edits, the pool's statement cache."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip()

    p = inspect.signature(dbpool.create_pool).parameters.get("statement_cache_size")
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty_agentd": git("status", "--porcelain", "agentd").splitlines(),
        "engine_pool_statement_cache_size": p.default if p is not None else None,
    }


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    rounds = a.rounds or default_rounds(a.loops, a.seconds, a.warmup)
    print(
        f"  seeding {a.loops} loops x {2 * rounds + 1} jobs (rounds={rounds}) per agentd run",
        flush=True,
    )
    prov = provenance()
    async with ThrowawayDB("b1") as db:
        await baseline.setup(db.url)
        combos = [(True, 1), (True, 16), (False, 1), (False, 16)]
        cal = Calibration(db.url, combos, seconds=a.b0_seconds)
        cal.run("before")
        runs = []
        bare: dict[tuple[str, bool, int], dict[str, Any]] = {}
        for sync in (True, False):
            await db.set_sync(sync)
            for c in (1, 16):
                r = await one(db.url, sync, c, a.seconds, a.warmup, rounds, a.loops, a.prime_max)
                runs.append(r)
                print(
                    f"  B1 sync={'on' if sync else 'off'} c={c}: {r['jobs_per_s']:.0f} jobs/s,"
                    f" {r['rt_per_job']:.1f} RT/job, {r['commits_per_job']:.2f} commits/job"
                    f" (seeded in {r['seed_seconds']:.1f} s, warmup {r['warmup_seconds']:.1f} s,"
                    f" first turns {r['first_turn_share']:.0%} of the window's LLM turns)",
                    flush=True,
                )
                if r["drained"]:
                    print(
                        f"  WARNING: agentd {sc(sync, c)} drained/stalled: series {r['series']},"
                        f" llm queue emptied={r['llm_queue_emptied']} — raise --rounds/--loops",
                        flush=True,
                    )
                for v in baseline.VARIANTS:
                    b = await baseline.run(db.url, v, c, a.seconds, a.warmup, a.loops)
                    b["sync"] = sync
                    b["dipped"] = baseline.dips(b["series"])
                    bare[(v, sync, c)] = b
                    print(
                        f"  bare {v} sync={'on' if sync else 'off'} c={c}:"
                        f" {b['turns_per_s']:.0f} turns/s"
                        + (f" (WARNING: dip, series {b['series']})" if b["dipped"] else ""),
                        flush=True,
                    )
        await db.set_sync(True)
        cal.run("after")
    L = cal.L(True)
    targets = {(True, 1): 0.40, (True, 16): 0.25, (False, 16): 0.12, (False, 1): None}
    rows = []
    cmp_rows = []
    for r in runs:
        key = (r["sync"], r["c"])
        R = cal.R(*key)
        r["R"] = R
        r["ratio"] = r["jobs_per_s"] / R
        t = targets[key]
        rows.append(
            [
                sc(*key),
                r["jobs_per_s"],
                R,
                r["ratio"],
                t if t is not None else "-",
                "ok" if t is None or r["ratio"] >= t else "MISS",
                r["llm_turns_per_s"],
                r["rt_per_job"],
                r["commits_per_job"],
                f"{r['first_turn_share']:.0%}",
                "DRAINED" if r["drained"] else "no",
            ]
        )
        two, ch = bare[("2tx", *key)], bare[("chain", *key)]
        r["bare_2tx_per_s"] = two["turns_per_s"]
        r["bare_chain_per_s"] = ch["turns_per_s"]
        r["bare_2tx_ratio"] = two["turns_per_s"] / R
        r["bare_chain_ratio"] = ch["turns_per_s"] / R
        r["agentd_over_2tx"] = r["jobs_per_s"] / two["turns_per_s"]
        r["agentd_over_chain"] = r["jobs_per_s"] / ch["turns_per_s"]
        cmp_rows.append(
            [
                sc(*key),
                r["jobs_per_s"],
                two["turns_per_s"],
                ch["turns_per_s"],
                R,
                r["ratio"],
                r["bare_2tx_ratio"],
                r["bare_chain_ratio"],
                r["agentd_over_2tx"],
                DOC_2TX[key],
                DOC_CHAIN[key],
            ]
        )
    out = table(
        "B1 engine overhead (zero model/tool): jobs/s ÷ R(sync,c)",
        [
            "sync/c",
            "jobs/s",
            "R",
            "ratio",
            "target",
            "",
            "llm turns/s",
            "RT/job",
            "commits/job",
            "1st turns",
            "drained",
        ],
        rows,
    )
    out += "\n" + table(
        "B1 vs same-run bare asyncpg patterns (§7 prototype): turns/s, ratios",
        [
            "sync/c",
            "agentd/s",
            "2tx/s",
            "chain/s",
            "R",
            "agentd÷R",
            "2tx÷R",
            "chain÷R",
            "agentd÷2tx",
            "§3.2 2tx÷R",
            "§3.2 chain÷R",
        ],
        cmp_rows,
    )
    b2 = next(r for r in runs if r["sync"] and r["c"] == 1)
    two_p50 = pct(bare[("2tx", True, 1)]["lat"], 50)
    b2rows = []
    b2_series = [
        ("agentd llm", b2["llm_lat"], 2.5),
        ("agentd tool", b2["tool_lat"], 2.5),
        ("bare 2tx", bare[("2tx", True, 1)]["lat"], 2.5),
        ("bare chain", bare[("chain", True, 1)]["lat"], 1.3),
    ]
    for q, xs, tgt in b2_series:
        p50, p99 = pct(xs, 50), pct(xs, 99)
        b2rows.append(
            [
                q,
                len(xs),
                p50 * 1e3,
                p99 * 1e3,
                L * 1e3,
                p50 / L,
                f"≤{tgt}",
                "ok" if p50 / L <= tgt else "MISS",
                p99 / L,
                "≤5",
                "ok" if p99 / L <= 5 else "MISS",
                p50 / two_p50,
            ]
        )
    out += "\n" + table(
        "B2 DB overhead per job (claim start → finalize/complete commit), sync on, c=1",
        [
            "job",
            "n",
            "p50 ms",
            "p99 ms",
            "L ms",
            "p50/L",
            "target",
            "",
            "p99/L",
            "target",
            "",
            "p50÷2tx p50",
        ],
        b2rows,
    )
    n_llm, n_tool = len(b2["llm_lat"]), len(b2["tool_lat"])
    if n_tool < 0.9 * n_llm:
        note = (
            f"  note: B2 timed only {n_tool} tool calls for {n_llm} LLM turns (engine_proc"
            " times a call from its claim, or from its turn's handoff when chained)"
        )
        print(note, flush=True)
        out += "\n" + note
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
    bare_json = []
    for b in bare.values():
        b["lat_p50"], b["lat_p99"] = pct(b["lat"], 50), pct(b["lat"], 99)
        b["R"] = cal.R(b["sync"], b["c"])
        b["ratio"] = b["turns_per_s"] / b["R"]
        b.pop("lat")
        bare_json.append(b)
    drained = [sc(r["sync"], r["c"]) for r in runs if r["drained"]]
    if drained:
        print(f"  WARNING: drained/stalled agentd runs: {drained} (jobs/s understated)")

    def chart(axes: list[Any]) -> None:
        labels = [sc(r["sync"], r["c"]) for r in runs]
        ratio_bar(
            axes[0],
            labels,
            [r["ratio"] for r in runs],
            [targets[(r["sync"], r["c"])] for r in runs],
        )
        axes[0].set_title("agentd jobs/s ÷ R (targets)")
        ax = axes[1]
        groups = [
            ("agentd÷R", "ratio", "tab:blue"),
            ("2tx÷R", "bare_2tx_ratio", "tab:gray"),
            ("chain÷R", "bare_chain_ratio", "silver"),
            ("agentd÷2tx", "agentd_over_2tx", "tab:orange"),
        ]
        w = 0.8 / len(groups)
        for i, (name, k, color) in enumerate(groups):
            xs = [j + (i - (len(groups) - 1) / 2) * w for j in range(len(runs))]
            ax.bar(xs, [r[k] for r in runs], w, label=name, color=color)
        ax.set_xticks(range(len(runs)), labels)
        ax.set_ylabel("ratio")
        ax.set_title("same-run bare asyncpg patterns")
        ax.legend(fontsize="small")

    save(
        "b1_overhead",
        {
            "calibration": cal.as_json(),
            "L_s": L,
            "provenance": prov,
            "loops": a.loops,
            "rounds": rounds,
            "drained": bool(drained),
            "runs": runs,
            "bare": bare_json,
            "b2": b2rows,
            "table": out,
        },
        chart,
        panels=2,
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--warmup", type=float, default=3)
    p.add_argument("--loops", type=int, default=2000, help="loops seeded per run (spec: 2,000)")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="tool rounds per loop (2·rounds+1 jobs); default: seeded jobs ≥ "
        f"3 x {EXPECTED_JOBS_PER_S}/s x (warmup + seconds) + priming",
    )
    p.add_argument(
        "--prime-max",
        type=float,
        default=120,
        help="extend the warmup (by up to this many s) until every loop has had its first "
        "LLM turn, whose one-off setup would otherwise dominate the window; 0 = plain warmup",
    )
    p.add_argument("--b0-seconds", type=float, default=5)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

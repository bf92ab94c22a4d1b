"""B7: long loops stay linear. Black box: `agentd worker` and `agentd api` started from the
CLI, a TOML agent (non-streaming), the model (bench.b7_fake: every answer is one `echo`
call with `--bytes` of fresh random text) and the MCP server as processes over HTTP,
`--loops` loops started with `POST /v1/loops`, each running `--rounds` rounds of one LLM
turn + one tool call (`max_steps` = rounds pauses it at the end), ~2 messages per round.

Measured, all from the same run:

* **time per round** of each loop, from its assistant messages' timestamps (round k = the
  time between the k-th and the (k+1)-th answer: one LLM turn and one tool call). Early =
  the median over rounds 5–15 (about 10–30 messages), late = the median over the last 20
  rounds. Target: late ÷ early ≤ 1.3.
* **CPU per round**: the worker's and the bench database's PostgreSQL backends' CPU
  seconds over the same early window and the 20 rounds before the last 5 (all loops still
  running), divided by the rounds done in them (on a
  shared box the wall time moves with the neighbours; the CPU spent per round does not).
* **bytes stored per turn**: every row a round wrote (events, messages, tool calls, and any
  other table with a `loop_id` and `created_at`), as PostgreSQL stores it (pg_column_size
  of the row: TOAST-compressed, no page slack), attributed to rounds by the same
  timestamps. Early = rounds 3–7 (≈ 10 messages), late = the last 10 rounds. Target:
  late ÷ early ≤ 2. Beside it, each table's pg_total_relation_size at the end.

`--profile` adds a py-spy top-20 of the worker over the last third of the run
(`--profile-at 0.02 --profile-seconds 5`: the early rounds instead).

    python -m bench.b7_long_loops [--loops 16 --rounds 250 --bytes 64 --concurrency 16]
                                  [--dialect open_ai] [--profile] [--agentd-src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil

from bench.b11_userpath import AGENTD, agentd_env, free_port, pyspy_top, spawn, wait_http
from bench.common import PY, RESULTS, Proc, ThrowawayDB, fake_mcp, save, table

EARLY_TIME = (5, 15)  # rounds (1-based) whose median is "early"
LATE_TIME = 20  # the last N rounds are "late"
EARLY_BYTES = (3, 7)
LATE_BYTES = 10


def toml_agent(llm_url: str, mcp_url: str, rounds: int, dialect: str = "open_ai") -> str:
    return f"""
[agents.b7]
dialect = "{dialect}"
base_url = "{llm_url}"
model = "fake-model"
system_prompt = "b7"
streaming = false
max_steps = {rounds}

[[agents.b7.mcps]]
name = "fake"
url = "{mcp_url}"
"""


async def start_loops(api: str, token: str, n: int) -> list[str]:
    async with httpx.AsyncClient(
        base_url=api, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as h:

        async def one(i: int) -> str:
            r = await h.post("/v1/loops", json={"agent": "b7", "message": f"loop {i}: go"})
            r.raise_for_status()
            return str(r.json()["id"])

        return list(await asyncio.gather(*(one(i) for i in range(n))))


# Every row a loop wrote, with the time it was written and its stored size. Tables are found
# by their columns, so a schema that stores wire logs elsewhere is counted too.
ROWS_SQL = """
SELECT format('SELECT %L AS tbl, loop_id, created_at, pg_column_size(x.*) AS bytes FROM %I x',
              c.relname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r'
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'loop_id')
  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'created_at')
"""


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


async def backends(db: asyncpg.Connection) -> list[int]:
    """The PostgreSQL backends serving the bench database, but this sampler's own."""
    rows = await db.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid()"
    )
    return [r["pid"] for r in rows]


class Sampler:
    """Every `every` s: rounds done (answers) and the CPU seconds of the worker and of the
    database's backends, so CPU per round can be compared early vs late in the same run
    (wall time per round on a shared, loaded box moves with the neighbours)."""

    def __init__(self, db: asyncpg.Connection, worker_pid: int, every: float = 0.25) -> None:
        self.db, self.worker_pid, self.every = db, worker_pid, every
        self.samples: list[tuple[float, float, float, float]] = []  # rounds/loop, answers, w, pg

    async def run(self, n_loops: int) -> None:
        while True:
            # Every time: a backend that connects later (the worker's pool grows) counts
            # from the sample it first appears in, so a window's delta may miss its first
            # tick; a backend that leaves takes its CPU with it. Both are small against a
            # window of several seconds.
            pids = await backends(self.db)
            answers = await self.db.fetchval(
                "SELECT count(*) FROM messages WHERE role = 'assistant' AND NOT hidden"
            )
            self.samples.append(
                (answers / n_loops, float(answers), cpu_of([self.worker_pid]), cpu_of(pids))
            )
            await asyncio.sleep(self.every)

    def per_round(self, lo: float, hi: float) -> dict[str, float]:
        """Worker and PostgreSQL CPU ms per round while rounds/loop was within [lo, hi]."""
        inside = [s for s in self.samples if lo <= s[0] <= hi]
        if len(inside) < 2 or inside[-1][1] == inside[0][1]:
            return {"worker_ms": float("nan"), "pg_ms": float("nan")}
        a, b = inside[0], inside[-1]
        n = b[1] - a[1]
        return {"worker_ms": 1000 * (b[2] - a[2]) / n, "pg_ms": 1000 * (b[3] - a[3]) / n}


async def collect(db: asyncpg.Connection, loop_ids: list[str]) -> dict[str, Any]:
    answers = await db.fetch(
        "SELECT loop_id::text AS loop_id, created_at FROM messages"
        " WHERE role = 'assistant' AND NOT hidden ORDER BY loop_id, id"
    )
    bounds: dict[str, list[float]] = {}
    for r in answers:
        bounds.setdefault(r["loop_id"], []).append(r["created_at"].timestamp())
    per_round_ms: dict[str, list[float]] = {
        lid: [1000 * (b[i + 1] - b[i]) for i in range(len(b) - 1)] for lid, b in bounds.items()
    }
    parts = [r[0] for r in await db.fetch(ROWS_SQL)]
    rows = await db.fetch(" UNION ALL ".join(parts))
    # bytes[loop][round k]: rows written after answer k-1 and up to answer k (round 0: the
    # start), the tool call and its result with the answer that follows them.
    import bisect

    per_round_bytes: dict[str, dict[int, int]] = {}
    by_table: dict[str, int] = {}
    for r in rows:
        lid = str(r["loop_id"])
        if lid not in bounds:
            continue
        k = bisect.bisect_left(bounds[lid], r["created_at"].timestamp())
        per_round_bytes.setdefault(lid, {}).setdefault(k, 0)
        per_round_bytes[lid][k] += int(r["bytes"])
        by_table[r["tbl"]] = by_table.get(r["tbl"], 0) + int(r["bytes"])
    sizes = {
        r["relname"]: int(r["size"])
        for r in await db.fetch(
            "SELECT c.relname, pg_total_relation_size(c.oid) AS size FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 2 DESC"
        )
    }

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    early_t, late_t, early_b, late_b = [], [], [], []
    for lid in loop_ids:
        rt = per_round_ms.get(lid, [])
        n = len(rt)
        if n < EARLY_TIME[1] + LATE_TIME:
            continue
        early_t.append(med(rt[EARLY_TIME[0] - 1 : EARLY_TIME[1]]))
        late_t.append(med(rt[-LATE_TIME:]))
        rb = per_round_bytes.get(lid, {})
        last = len(bounds[lid]) - 1  # the final answer's round (its tool call ended the run)
        early_b.append(med([rb.get(k, 0) for k in range(EARLY_BYTES[0], EARLY_BYTES[1] + 1)]))
        late_b.append(med([rb.get(k, 0) for k in range(last - LATE_BYTES, last)]))
    early_ms, late_ms = med(early_t), med(late_t)
    # A round is 2 turns (one LLM call, one tool call).
    early_bpt, late_bpt = med(early_b) / 2, med(late_b) / 2
    msgs = await db.fetchval(
        "SELECT avg(n)::float8 FROM (SELECT count(*) AS n FROM messages GROUP BY loop_id) x"
    )
    return {
        "messages_per_loop": msgs,
        "early_round_ms": early_ms,
        "late_round_ms": late_ms,
        "time_ratio": late_ms / early_ms,
        "early_bytes_per_turn": early_bpt,
        "late_bytes_per_turn": late_bpt,
        "bytes_ratio": late_bpt / early_bpt,
        "row_bytes_by_table": by_table,
        "relation_sizes": sizes,
        "round_ms_curve": [
            med([per_round_ms[lid][i] for lid in loop_ids if i < len(per_round_ms.get(lid, []))])
            for i in range(max((len(v) for v in per_round_ms.values()), default=0))
        ],
    }


async def run(a: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="b7-"))
    llm = Proc([PY, "-m", "bench.b7_fake", "--bytes", str(a.bytes)]).start()
    mcp = fake_mcp()
    llm_url, mcp_url = f"http://127.0.0.1:{llm.port}", f"http://127.0.0.1:{mcp.port}/mcp"
    config = work / "agentd.toml"
    config.write_text(toml_agent(llm_url, mcp_url, a.rounds, a.dialect))
    token = secrets.token_hex(16)
    port = free_port()
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / "b7.log"
    try:
        async with ThrowawayDB("b7") as tdb:
            env = agentd_env(tdb.url, port, token, config, a.concurrency)
            env.update(a.env or {})
            cli = [AGENTD]
            if a.agentd_src:  # another checkout's agentd (a same-config "before")
                env["PYTHONPATH"] = a.agentd_src
                cli = [PY, "-P", "-m", "agentd"]  # -P: not this checkout from the cwd
            api_url = f"http://127.0.0.1:{port}"
            api = spawn([*cli, "api"], env, log)
            worker = None
            try:
                await wait_http(f"{api_url}/healthz")
                loop_ids = await start_loops(api_url, token, a.loops)
                t0 = time.perf_counter()
                worker = spawn([*cli, "worker"], env, log)
                db = await asyncpg.connect(tdb.url)
                sdb = await asyncpg.connect(tdb.url)
                sampler = Sampler(sdb, worker.pid)
                sampling = asyncio.create_task(sampler.run(a.loops))
                prof = None
                try:
                    while True:
                        await asyncio.sleep(1.0)
                        left, steps = await db.fetchrow(
                            "SELECT count(*) FILTER (WHERE status IN ('queued','running',"
                            "'waiting')), coalesce(min(step_count), 0) FROM loops"
                        )
                        if prof is None and a.profile and steps >= a.rounds * a.profile_at:
                            prof = asyncio.create_task(
                                asyncio.to_thread(
                                    pyspy_top, worker.pid, a.profile_seconds, RESULTS / "b7-pyspy"
                                )
                            )
                        if left == 0:
                            break
                        if worker.poll() is not None:
                            raise RuntimeError(f"agentd worker exited: see {log}")
                    elapsed = time.perf_counter() - t0
                    sampling.cancel()
                    res = await collect(db, loop_ids)
                    early = sampler.per_round(EARLY_TIME[0], EARLY_TIME[1])
                    # Not the very end: loops finish at slightly different times, and with
                    # fewer of them left the worker's fixed background work (ticks, polls)
                    # is shared by fewer rounds.
                    late = sampler.per_round(a.rounds - LATE_TIME - 5, a.rounds - 5)
                    res["cpu_per_round"] = {"early": early, "late": late}
                    res["cpu_ratio"] = (late["worker_ms"] + late["pg_ms"]) / (
                        early["worker_ms"] + early["pg_ms"]
                    )
                    res["seconds"] = elapsed
                    res["statuses"] = dict(
                        await db.fetch("SELECT status, count(*) FROM loops GROUP BY 1")
                    )
                    if prof is not None:
                        res["pyspy_top20"] = await prof
                finally:
                    sampling.cancel()
                    await db.close()
                    await sdb.close()
            finally:
                if worker is not None:
                    worker.terminate()
                    worker.wait(15)
                api.terminate()
                api.wait(15)
    finally:
        llm.stop()
        mcp.stop()
    return res


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--loops", type=int, default=16)
    p.add_argument("--rounds", type=int, default=250)
    p.add_argument("--bytes", type=int, default=64, help="size of each answer's tool argument")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--dialect", choices=["open_ai", "anthropic", "gemini"], default="open_ai")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--profile-seconds", type=float, default=20)
    p.add_argument(
        "--profile-at", type=float, default=2 / 3, help="start it at this fraction of the rounds"
    )
    p.add_argument("--env", type=lambda s: dict(kv.split("=", 1) for kv in s.split(",")))
    p.add_argument(
        "--agentd-src",
        help="run `agentd worker`/`api` from this source tree (e.g. an export of the"
        " commit before a change); the schema is this checkout's (migrations are expand-only)",
    )
    a = p.parse_args()
    from agentd import logs

    logs.configure("console", "warning")
    res = asyncio.run(run(a))
    txt = table(
        f"B7 long loops: {a.loops} loops x {a.rounds} rounds (LLM + tool), "
        f"{a.bytes}-byte payloads, concurrency {a.concurrency}, {a.dialect}",
        ["", "early", "late", "late ÷ early", "target"],
        [
            [
                "round ms (median)",
                res["early_round_ms"],
                res["late_round_ms"],
                res["time_ratio"],
                "≤ 1.3",
            ],
            [
                "CPU ms per round (worker + PG)",
                res["cpu_per_round"]["early"]["worker_ms"] + res["cpu_per_round"]["early"]["pg_ms"],
                res["cpu_per_round"]["late"]["worker_ms"] + res["cpu_per_round"]["late"]["pg_ms"],
                res["cpu_ratio"],
                "≤ 1.3",
            ],
            [
                "bytes stored per turn",
                res["early_bytes_per_turn"],
                res["late_bytes_per_turn"],
                res["bytes_ratio"],
                "≤ 2",
            ],
        ],
    )
    txt += "\n" + table(
        f"storage at the end ({res['messages_per_loop']:.0f} messages per loop, "
        f"{res['seconds']:.0f} s)",
        ["table", "row bytes (loop rows)", "pg_total_relation_size"],
        [
            [t, res["row_bytes_by_table"].get(t, 0), s]
            for t, s in res["relation_sizes"].items()
            if s > 64 * 1024
        ],
    )
    if res.get("pyspy_top20"):
        txt += "\n" + table(
            "py-spy, agentd worker, late rounds: top 20 by total %",
            ["frame", "total %", "self %"],
            [list(x) for x in res["pyspy_top20"]],
        )

    def chart(ax: Any) -> None:
        ax.plot(range(1, len(res["round_ms_curve"]) + 1), res["round_ms_curve"])
        ax.set_xlabel("round")
        ax.set_ylabel("ms per round (median over loops)")

    save("b7_long_loops", {"args": vars(a), **res, "table": txt}, chart=chart)


if __name__ == "__main__":
    main()

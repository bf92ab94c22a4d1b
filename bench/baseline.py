"""Same-run reference patterns for B1/B2: the bare asyncpg queue turns of the reference
doc's prototype (`/work/shared/reference/postgres-performance.md` §7), measured in the
throwaway database right next to each agentd measurement (same sync mode, concurrency and
duration).

* ``2tx``   — claim (1 RT, 1 commit) → fenced complete + advance + successor CTE (1 RT,
  1 commit). The minimum for lease-based claiming.
* ``chain`` — the CTE inserts the successor already leased to the same worker and returns
  it; the worker continues without claiming (re-claims only when the chain returns nothing).
  1 RT and 1 commit per turn.

Own tables (``proto_runs``/``proto_jobs``, so they don't collide with agentd's ``jobs``),
2,000 runs seeded with one queued job each, c asyncio workers with one default asyncpg
connection each (statement cache on). A turn = one job, like an agentd job (LLM turn or
tool call). Per-turn latency: claim start → complete commit (chain: the CTE alone, plus the
claim when one was needed).

    python -m bench.baseline [--seconds 10 --warmup 3]   # standalone, prints turns/s
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import asyncpg

SCHEMA = """
CREATE TABLE IF NOT EXISTS proto_runs (
    id bigint PRIMARY KEY, step int NOT NULL DEFAULT 0,
    state jsonb NOT NULL DEFAULT '{}', updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS proto_jobs (
    id bigserial PRIMARY KEY, run_id bigint NOT NULL REFERENCES proto_runs(id),
    kind text NOT NULL, status text NOT NULL DEFAULT 'queued', token uuid,
    lease_expires_at timestamptz, attempt int NOT NULL DEFAULT 0, payload jsonb, result jsonb,
    created_at timestamptz NOT NULL DEFAULT now(), run_after timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS proto_jobs_ready ON proto_jobs (run_after, id) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS proto_jobs_lease ON proto_jobs (lease_expires_at)
    WHERE status = 'running';
CREATE INDEX IF NOT EXISTS proto_jobs_run ON proto_jobs (run_id);
"""

CLAIM = """
UPDATE proto_jobs SET status = 'running', token = $1,
       lease_expires_at = now() + interval '30 seconds', attempt = attempt + 1
 WHERE id = (SELECT id FROM proto_jobs WHERE status = 'queued' AND run_after <= now()
             ORDER BY run_after, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, run_id, payload
"""

# Fenced complete + advance + successor; 0 rows => lease lost.
COMPLETE = """
WITH done AS (UPDATE proto_jobs SET status = 'done', result = $3
               WHERE id = $1 AND token = $2 AND status = 'running' RETURNING run_id),
     adv  AS (UPDATE proto_runs SET step = step + 1, state = $4, updated_at = now()
               WHERE id = (SELECT run_id FROM done) RETURNING id, step)
INSERT INTO proto_jobs (run_id, kind, payload)
SELECT id, CASE WHEN step % 2 = 0 THEN 'llm' ELSE 'tool' END, $5 FROM adv RETURNING id
"""

# Chained variant: the successor is inserted already leased ($6) and returned.
CHAIN = """
WITH done AS (UPDATE proto_jobs SET status = 'done', result = $3
               WHERE id = $1 AND token = $2 AND status = 'running' RETURNING run_id),
     adv  AS (UPDATE proto_runs SET step = step + 1, state = $4, updated_at = now()
               WHERE id = (SELECT run_id FROM done) RETURNING id, step)
INSERT INTO proto_jobs (run_id, kind, payload, status, token, lease_expires_at, attempt)
SELECT id, CASE WHEN step % 2 = 0 THEN 'llm' ELSE 'tool' END, $5, 'running', $6,
       now() + interval '30 seconds', 1
  FROM adv RETURNING id, run_id, payload
"""

VARIANTS = ("2tx", "chain")
RESULT = '{"ok": true}'
STATE = '{"bench": "proto"}'
PAYLOAD = '{"turn": "next"}'


async def setup(url: str) -> None:
    c = await asyncpg.connect(url)
    try:
        await c.execute(SCHEMA)
    finally:
        await c.close()


async def reseed(url: str, runs: int = 2000) -> None:
    """Fresh queue tables: `runs` runs, one queued job each (as the prototype did)."""
    c = await asyncpg.connect(url)
    try:
        await c.execute("TRUNCATE proto_jobs, proto_runs RESTART IDENTITY")
        await c.execute(
            "INSERT INTO proto_runs (id) SELECT g FROM generate_series(1, $1::int) g", runs
        )
        await c.execute(
            "INSERT INTO proto_jobs (run_id, kind, payload)"
            " SELECT g, 'llm', $2::jsonb FROM generate_series(1, $1::int) g",
            runs,
            PAYLOAD,
        )
        await c.execute("ANALYZE proto_runs, proto_jobs")
    finally:
        await c.close()


class _Stats:
    def __init__(self) -> None:
        self.turns = 0
        self.lost = 0  # fenced completions that returned no row (must stay 0)
        self.idle = 0  # claims that found nothing
        self.record = False
        self.lat: list[float] = []

    def done(self, t0: float) -> None:
        self.turns += 1
        if self.record:
            self.lat.append(time.perf_counter() - t0)


async def _worker_2tx(conn: asyncpg.Connection, stop: asyncio.Event, st: _Stats) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        tok = uuid.uuid4()
        job = await conn.fetchrow(CLAIM, tok)
        if job is None:
            st.idle += 1
            await asyncio.sleep(0.001)
            continue
        nxt = await conn.fetchval(COMPLETE, job["id"], tok, RESULT, STATE, PAYLOAD)
        if nxt is None:
            st.lost += 1
        st.done(t0)


async def _worker_chain(conn: asyncpg.Connection, stop: asyncio.Event, st: _Stats) -> None:
    job: Any = None
    tok = uuid.uuid4()
    while not stop.is_set():
        t0 = time.perf_counter()
        if job is None:
            tok = uuid.uuid4()
            job = await conn.fetchrow(CLAIM, tok)
            if job is None:
                st.idle += 1
                await asyncio.sleep(0.001)
                continue
        new = uuid.uuid4()
        nxt = await conn.fetchrow(CHAIN, job["id"], tok, RESULT, STATE, PAYLOAD, new)
        if nxt is None:
            st.lost += 1
        job, tok = nxt, new
        st.done(t0)


async def run(
    url: str, variant: str, c: int, seconds: float, warmup: float, runs: int = 2000
) -> dict[str, Any]:
    """One measurement: reseed, `warmup` s, then `seconds` 1-s windows of completed turns."""
    assert variant in VARIANTS, variant
    await reseed(url, runs)
    conns = [await asyncpg.connect(url) for _ in range(c)]
    st = _Stats()
    stop = asyncio.Event()
    body = _worker_2tx if variant == "2tx" else _worker_chain
    tasks = [asyncio.create_task(body(cn, stop, st)) for cn in conns]
    try:
        await asyncio.sleep(warmup)
        st.record = True
        n0, t0 = st.turns, time.perf_counter()
        series = []
        for _ in range(int(seconds)):
            s0 = st.turns
            await asyncio.sleep(1.0)
            series.append(st.turns - s0)
        dt = time.perf_counter() - t0
        turns = st.turns - n0
        st.record = False
    finally:
        stop.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for cn in conns:
            await cn.close()
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    if errors:
        raise RuntimeError(f"bare {variant} worker failed: {errors[0]}")
    return {
        "variant": variant,
        "c": c,
        "turns": turns,
        "seconds": dt,
        "turns_per_s": turns / dt,
        "series": series,
        "lost": st.lost,
        "idle_claims": st.idle,
        "lat": st.lat,
    }


def dips(series: list[int], frac: float = 0.5) -> bool:
    """True when any 1-s window fell below `frac` × the median window."""
    if not series:
        return True
    med = statistics.median(series)
    return any(x < frac * med for x in series)


async def _main(a: argparse.Namespace) -> None:
    from bench.common import ThrowawayDB

    async with ThrowawayDB("base") as db:
        await setup(db.url)
        for sync in (True, False):
            await db.set_sync(sync)
            for c in (1, 16):
                for v in VARIANTS:
                    r = await run(db.url, v, c, a.seconds, a.warmup, a.runs)
                    print(
                        f"  bare {v} sync={'on' if sync else 'off'} c={c}:"
                        f" {r['turns_per_s']:.0f} turns/s, series {r['series']}",
                        flush=True,
                    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--warmup", type=float, default=3)
    p.add_argument("--runs", type=int, default=2000)
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    main()

"""B12: a streaming fleet, black box. `agentd api` and `agentd worker` started from the CLI,
a TOML agent with `streaming = true`, the model (bench.b12_fake: 200 tokens at 50 tokens/s
per answer) in its own process, `--loops` loops started with `POST /v1/loops`, one in ten
of them observed over `GET /v1/loops/{id}/stream` from the moment it starts. Beside it,
in the same run, the bare client (bench.b12_bare: httpx + httpx-sse, no database) reads as
many streams at once from the same model. Rounds alternate agentd and bare.
The bare client's own lag (the model's write → its read, for as many streams as agentd's
run observes) says what the box allows before any database, API or observer is involved.
Where agentd ran fewer streams at once than it had loops, one more bare round reads that
many streams: a saturated client reads bigger chunks and spends less per token, so the
worker is also compared with the bare client at the concurrency it actually ran.

Reported per round: a loop's POST → its first model request (p50/p99/max), the most
streams the model had open at once, observer lag per token (the model's write → the
observer's read; p50/p99), tokens an observer got only in the final `message` (missed),
deltas flagged `truncated`, and CPU seconds per 1,000 tokens of the worker, the API and
the bare client (and worker ÷ bare).

    python -m bench.b12_streaming_fleet [--loops 100 500 --rounds 3 --observe 0.1]
                                        [--profile] [--settings-env K=V ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil

from bench import b12_observe
from bench.b11_userpath import AGENTD, agentd_env, cpu, free_port, pyspy_top, spawn, wait_http
from bench.common import PY, RESULTS, ROOT, Proc, ThrowawayDB, pct, save, table

DONE = ("completed", "failed", "stopped")


def toml_agent(llm_url: str, tokens: int) -> str:
    return f"""
[agents.stream]
dialect = "open_ai"
base_url = "{llm_url}"
model = "fake"
system_prompt = "bench"
streaming = true
max_steps = 5
max_tokens = {tokens * 4}
"""


async def stats(h: httpx.AsyncClient) -> dict[str, Any]:
    r = await h.get("/stats")
    r.raise_for_status()
    return dict(r.json())


async def agentd_round(
    a: argparse.Namespace,
    n: int,
    api_url: str,
    token: str,
    db: asyncpg.Connection,
    model: httpx.AsyncClient,
    pids: dict[str, list[int]],
    rnd: int,
) -> dict[str, Any]:
    await stats(model)  # clears the model's record
    observe_every = max(1, round(1 / a.observe)) if a.observe > 0 else 0
    posted: dict[str, float] = {}
    answered: dict[str, float] = {}
    observers: list[asyncio.Task[b12_observe.Seen]] = []
    sem = asyncio.Semaphore(a.post_concurrency)
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=200)
    async with httpx.AsyncClient(
        base_url=api_url, headers=headers, timeout=120, limits=limits
    ) as h:

        def item(i: int) -> tuple[str, dict[str, Any]]:
            # The tag names the round's size too: a key reused across sizes would replay
            # the earlier round's loop (an idempotent start) instead of starting one.
            tag = f"n{n}r{rnd}l{i}"
            watch = bool(observe_every and i % observe_every == 0)
            return tag, {"agent": "stream", "message": f"go {tag}", "observe": watch}

        def watched(loop_id: str, body: dict[str, Any], tag: str) -> None:
            if body["observe"]:
                observers.append(asyncio.create_task(b12_observe.observe(h, loop_id, tag)))

        async def post(path: str, body: dict[str, Any], key: str | None) -> httpx.Response:
            for attempt in range(3):
                try:
                    # Idempotent: a POST retried after a dropped connection starts one loop.
                    extra = {"Idempotency-Key": key} if key else {}
                    r = await h.post(path, json=body, headers=extra)
                    break
                except httpx.TransportError:
                    if attempt == 2:
                        raise
            r.raise_for_status()
            return r

        async def start(i: int) -> str:
            tag, body = item(i)
            async with sem:
                posted[tag] = time.monotonic()
                r = await post("/v1/loops", body, tag)
                answered[tag] = time.monotonic()
            loop_id = str(r.json()["id"])
            watched(loop_id, body, tag)
            return loop_id

        async def start_batch(first: int) -> list[str]:
            items = [item(i) for i in range(first, min(n, first + a.batch))]
            async with sem:
                now = time.monotonic()
                posted.update({tag: now for tag, _ in items})
                body = {"loops": [{**b, "idempotency_key": tag} for tag, b in items]}
                r = await post("/v1/loops:batch", body, None)
                done = time.monotonic()
                answered.update({tag: done for tag, _ in items})
            ids = [str(x["id"]) for x in r.json()["loops"]]
            for loop_id, (tag, b) in zip(ids, items, strict=True):
                watched(loop_id, b, tag)
            return ids

        c0 = {k: sum(map(cpu, ps)) for k, ps in pids.items()}
        box0 = psutil.cpu_times()
        t0 = time.perf_counter()
        prof = None
        if a.profile:
            prof = asyncio.create_task(
                asyncio.to_thread(
                    pyspy_top,
                    pids["worker"][0],
                    a.profile_seconds,
                    RESULTS / f"b12-pyspy-{n}-{rnd}",
                )
            )
        if a.batch:
            chunks = await asyncio.gather(*(start_batch(i) for i in range(0, n, a.batch)))
            ids = [x for chunk in chunks for x in chunk]
        else:
            ids = await asyncio.gather(*(start(i) for i in range(n)))
        post_s = time.perf_counter() - t0
        deadline = time.monotonic() + a.timeout
        while True:
            left = await db.fetchval(
                "SELECT count(*) FROM loops WHERE id = ANY($1::uuid[]) AND status <> ALL($2)",
                ids,
                list(DONE),
            )
            if left == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        wall = time.perf_counter() - t0
        c1 = {k: sum(map(cpu, ps)) for k, ps in pids.items()}
        box = busy_share(box0, psutil.cpu_times())
        seen = await asyncio.gather(*observers)
    failed = await db.fetchval(
        "SELECT count(*) FROM loops WHERE id = ANY($1::uuid[]) AND status <> 'completed'", ids
    )
    rec = await stats(model)
    by_tag = {r["tag"]: r for r in rec["requests"]}
    first = [by_tag[t]["arrival"] - p for t, p in posted.items() if t in by_tag]
    # The first request's wait split in two: the API's answer, then the worker's claim and
    # turn start (the model may see a request before the API's answer reaches the client).
    api = [answered[t] - p for t, p in posted.items() if t in answered]
    after = [by_tag[t]["arrival"] - answered[t] for t in answered if t in by_tag]
    tokens = sum(len(r["emits"]) for r in rec["requests"] if r["tag"] in posted)
    scores = [b12_observe.score(s, by_tag[s.tag]["emits"]) for s in seen if s.tag in by_tag]
    lags = [x for sc in scores for x in sc["lags"]]
    # Where the tail sits: lag p99 of the tokens the model wrote in each second of the round.
    origin = min(posted.values())
    by_second: dict[int, list[float]] = {}
    for sc in scores:
        for at, lag in zip(sc["emitted"], sc["lags"], strict=True):
            by_second.setdefault(int(at - origin), []).append(lag)
    per_k = lambda k: 1000 * (c1[k] - c0[k]) / tokens if tokens else float("nan")  # noqa: E731
    out = {
        "who": "agentd",
        "loops": n,
        "not_completed": failed,
        "post_s": post_s,
        "wall_s": wall,
        "tokens": tokens,
        "first_request_s": {"p50": pct(first, 50), "p99": pct(first, 99), "max": max(first)},
        "post_answered_s": {"p50": pct(api, 50), "p99": pct(api, 99)},
        "answer_to_request_s": {"p50": pct(after, 50), "p99": pct(after, 99)},
        "max_streams": rec["max_inflight"],
        "observed": len(seen),
        "observer_lag_s": {"p50": pct(lags, 50), "p99": pct(lags, 99), "max": max(lags, default=0)},
        "observer_lag_p99_by_second": {k: pct(v, 99) for k, v in sorted(by_second.items())},
        "tokens_observed": sum(sc["tokens_seen"] for sc in scores),
        "missed": sum(sc["missed"] for sc in scores),
        "truncated": sum(sc["truncated"] for sc in scores),
        "overlaps": sum(sc["overlap"] for sc in scores),
        "gaps": sum(sc["gaps"] for sc in scores),
        "observer_errors": [sc["error"] for sc in scores if sc["error"]],
        "empty_events": [e for sc in scores for e in sc["empty_events"]],
        "cpu_s_per_1k_tokens": {k: per_k(k) for k in c0},
        "box_busy": box,
    }
    if prof is not None:
        out["pyspy_top20"] = await prof
    return out


def busy_share(before: Any, after: Any) -> float:
    """The machine's cores busy between two psutil.cpu_times() readings, 0..1: every
    process's share (model, database, API, observers, worker), not only agentd's."""
    idle = (after.idle - before.idle) + (after.iowait - before.iowait)
    total = sum(after) - sum(before)
    return 1 - idle / total if total > 0 else float("nan")


async def bare_round(
    a: argparse.Namespace, n: int, llm_url: str, model: httpx.AsyncClient
) -> dict[str, Any]:
    await stats(model)
    every = max(1, round(1 / a.observe)) if a.observe > 0 else 0

    def bare(first: int, count: int) -> dict[str, Any]:
        argv = [PY, "-m", "bench.b12_bare", "--url", llm_url, "--n", str(count)]
        argv += ["--first", str(first), "--lag-every", str(every)]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=True)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    # As many bare processes as agentd has workers, each with its share of the streams:
    # the same streams per process (a client's cost per token depends on it).
    share = -(-n // a.workers)
    parts = await asyncio.gather(
        *(asyncio.to_thread(bare, first, min(share, n - first)) for first in range(0, n, share))
    )
    res = {
        "tokens": sum(r["tokens"] for r in parts),
        "cpu_s": sum(r["cpu_s"] for r in parts),
        "wall_s": max(r["wall_s"] for r in parts),
        "arrivals": {k: v for r in parts for k, v in r.get("arrivals", {}).items()},
    }
    rec = await stats(model)
    # The bare client's own lag (the model's write -> the client's read of the token), for
    # as many streams as agentd's run observes: what the box allows before any database.
    emits = {r["tag"]: r["emits"] for r in rec["requests"]}
    lags = [
        at - emits[tag][k]
        for tag, arrivals in res.get("arrivals", {}).items()
        if tag in emits
        for k, at in enumerate(arrivals[: len(emits[tag])])
    ]
    return {
        "who": "bare",
        "loops": n,
        "tokens": res["tokens"],
        "wall_s": res["wall_s"],
        "max_streams": rec["max_inflight"],
        "lag_s": {"p50": pct(lags, 50), "p99": pct(lags, 99), "max": max(lags, default=0)},
        "cpu_s_per_1k_tokens": {"bare": 1000 * res["cpu_s"] / res["tokens"]},
    }


async def run(a: argparse.Namespace) -> dict[str, Any]:
    fake_port = free_port()
    fake = Proc(
        [
            PY,
            "-m",
            "bench.b12_fake",
            "--port",
            str(fake_port),
            "--tokens",
            str(a.tokens),
            "--rate",
            str(a.rate),
        ],
        wait_listen=False,
    ).start()
    llm_url = f"http://127.0.0.1:{fake_port}"
    work = Path(tempfile.mkdtemp(prefix="b12-"))
    config = work / "agentd.toml"
    config.write_text(toml_agent(llm_url, a.tokens))
    token = secrets.token_hex(16)
    port = free_port()
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / "b12-agentd.log"
    rounds: list[dict[str, Any]] = []
    try:
        await wait_http(f"{llm_url}/stats")
        async with (
            ThrowawayDB("b12") as tdb,
            httpx.AsyncClient(base_url=llm_url, timeout=60) as model,
        ):
            # Each worker takes its share of the loops (and 16 spare slots).
            per_worker = -(-max(a.loops) // a.workers) + 16
            env = agentd_env(tdb.url, port, token, config, per_worker)
            for kv in a.settings_env:
                k, _, v = kv.partition("=")
                env[k] = v
            api_url = f"http://127.0.0.1:{port}"
            api = spawn([AGENTD, "api"], env, log)
            workers = [spawn([AGENTD, "worker"], env, log) for _ in range(a.workers)]
            db = await asyncpg.connect(tdb.url)
            try:
                await wait_http(f"{api_url}/healthz")
                await asyncio.sleep(2)  # the worker's imports and first LISTEN
                pids = {"worker": [w.pid for w in workers], "api": [api.pid]}
                for n in a.loops:
                    for rnd in range(a.rounds):
                        streams = n
                        for who in ("agentd", "bare") if rnd % 2 == 0 else ("bare", "agentd"):
                            if who == "agentd":
                                r = await agentd_round(a, n, api_url, token, db, model, pids, rnd)
                                streams = r["max_streams"]
                            else:
                                r = await bare_round(a, n, llm_url, model)
                            r["round"] = rnd
                            rounds.append(r)
                            print(
                                json.dumps({k: v for k, v in r.items() if k != "pyspy_top20"}),
                                flush=True,
                            )
                        if streams < n:
                            # The bare client at the concurrency agentd reached: its cost per
                            # token falls as it saturates its core (bigger reads), so "the
                            # same loops" and "the same streams at once" differ.
                            r = await bare_round(a, streams, llm_url, model)
                            r.update(who="bare_same_streams", loops=n, streams=streams, round=rnd)
                            rounds.append(r)
                            print(json.dumps(r), flush=True)
            finally:
                await db.close()
                for proc in (*workers, api):
                    proc.terminate()
                for proc in (*workers, api):
                    proc.wait(15)
    finally:
        fake.stop()
    return {"args": vars(a), "rounds": rounds, "summary": summarize(rounds)}


def summarize(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for n in sorted({r["loops"] for r in rounds}):
        ag = [r for r in rounds if r["loops"] == n and r["who"] == "agentd"]
        ba = {r["round"]: r for r in rounds if r["loops"] == n and r["who"] == "bare"}
        ratios = [
            r["cpu_s_per_1k_tokens"]["worker"] / ba[r["round"]]["cpu_s_per_1k_tokens"]["bare"]
            for r in ag
            if r["round"] in ba
        ]
        # Where agentd ran every stream at once, the same-streams bare round is the bare one.
        same = {**ba}
        same.update(
            {r["round"]: r for r in rounds if r["loops"] == n and r["who"] == "bare_same_streams"}
        )
        ratios_same = [
            r["cpu_s_per_1k_tokens"]["worker"] / same[r["round"]]["cpu_s_per_1k_tokens"]["bare"]
            for r in ag
            if r["round"] in same
        ]
        span = lambda xs: [min(xs), max(xs)] if xs else None  # noqa: E731
        out.append(
            {
                "loops": n,
                "first_request_p99_s": span([r["first_request_s"]["p99"] for r in ag]),
                "first_request_p50_s": span([r["first_request_s"]["p50"] for r in ag]),
                "post_answered_p99_s": span([r["post_answered_s"]["p99"] for r in ag]),
                "answer_to_request_p99_s": span([r["answer_to_request_s"]["p99"] for r in ag]),
                "max_streams": span([r["max_streams"] for r in ag]),
                "observer_lag_p50_s": span([r["observer_lag_s"]["p50"] for r in ag]),
                "observer_lag_p99_s": span([r["observer_lag_s"]["p99"] for r in ag]),
                "missed": sum(r["missed"] for r in ag),
                "truncated": sum(r["truncated"] for r in ag),
                "worker_cpu_s_per_1k": span([r["cpu_s_per_1k_tokens"]["worker"] for r in ag]),
                "api_cpu_s_per_1k": span([r["cpu_s_per_1k_tokens"]["api"] for r in ag]),
                "bare_cpu_s_per_1k": span([r["cpu_s_per_1k_tokens"]["bare"] for r in ba.values()]),
                "worker_over_bare": span(ratios),
                "worker_over_bare_median": statistics.median(ratios) if ratios else None,
                "worker_over_bare_same_streams": span(ratios_same),
                "box_busy": span([r["box_busy"] for r in ag]),
                "tokens_per_s": span([r["tokens"] / r["wall_s"] for r in ag]),
                "bare_lag_p99_s": span([r["lag_s"]["p99"] for r in ba.values()]),
                "bare_tokens_per_s": span([r["tokens"] / r["wall_s"] for r in ba.values()]),
            }
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loops", type=int, nargs="+", default=[100, 500])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--observe", type=float, default=0.1, help="share of loops observed")
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--rate", type=float, default=50.0, help="tokens/s per stream")
    p.add_argument("--post-concurrency", type=int, default=32)
    p.add_argument(
        "--batch",
        type=int,
        default=0,
        metavar="K",
        help="start the loops with POST /v1/loops:batch, K per request (≤ 500), not one by one",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="per round")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="`agentd worker` processes (each AGENTD_LLM_CONCURRENCY = its share + 16); "
        "their CPU is summed",
    )
    p.add_argument("--profile", action="store_true", help="py-spy top-20 of the (first) worker")
    p.add_argument("--profile-seconds", type=float, default=8.0)
    p.add_argument("--settings-env", nargs="*", default=[], metavar="AGENTD_X=V")
    a = p.parse_args()
    res = asyncio.run(run(a))
    rows = [
        [
            s["loops"],
            s["first_request_p50_s"],
            s["first_request_p99_s"],
            s["post_answered_p99_s"],
            s["answer_to_request_p99_s"],
            s["max_streams"],
            s["observer_lag_p50_s"],
            s["observer_lag_p99_s"],
            s["bare_lag_p99_s"],
            s["missed"],
            s["truncated"],
            s["worker_cpu_s_per_1k"],
            s["bare_cpu_s_per_1k"],
            s["worker_over_bare"],
            s["worker_over_bare_same_streams"],
            s["box_busy"],
        ]
        for s in res["summary"]
    ]
    fmt = lambda v: " to ".join(f"{x:.3g}" for x in v) if isinstance(v, list) else v  # noqa: E731
    rows = [[fmt(v) for v in row] for row in rows]
    table(
        "B12 streaming fleet (ranges over rounds)",
        [
            "loops",
            "1st req p50 s",
            "1st req p99 s",
            "POST answered p99 s",
            "answer → req p99 s",
            "max streams",
            "lag p50 s",
            "lag p99 s",
            "bare lag p99 s",
            "missed",
            "truncated",
            "worker cpu s/1k tok",
            "bare cpu s/1k tok",
            "worker÷bare",
            "÷ bare at agentd's streams",
            "box busy",
        ],
        rows,
    )
    save("b12", res)


if __name__ == "__main__":
    main()

"""Control latency: POST /v1/loops/{id}/stop (and /pause) → the in-flight streaming LLM
connection is closed at FakeLLM (which logs each client disconnect with a timestamp).
The worker, the API and FakeLLM are three separate processes. Target p95 ≤ 1 s.

    python -m bench.c9_control [--n 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from agentd.db import pool as dbpool
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from bench import agents
from bench.common import PY, Calibration, Proc, ThrowawayDB, fake_llm, pct, save, table

TOKEN = "bench-token"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def events(path: Path, kind: str) -> list[float]:
    if not path.exists():
        return []
    return [e["t"] for e in map(json.loads, path.read_text().splitlines()) if e["kind"] == kind]


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    ev = Path(tempfile.mktemp(suffix=".jsonl"))
    llm = fake_llm(
        [{"match": None, "reply": {"content": "t" * 1600, "chunk_size": 8, "chunk_delay": 0.05}}],
        events=ev,
    )
    port = free_port()
    results: list[dict[str, Any]] = []
    try:
        async with ThrowawayDB("c9") as tdb:
            cal = Calibration(tdb.url, [(True, 1)], seconds=3)
            cal.run("before")
            w = Proc([PY, "-m", "bench.engine_proc", "--url", tdb.url, "--llm", "http"]).start()
            api = Proc(
                [PY, "-m", "agentd", "api"],
                wait_listen=False,
                env={
                    "AGENTD_DATABASE_URL": tdb.url,
                    "AGENTD_API_TOKEN": TOKEN,
                    "AGENTD_PORT": str(port),
                    "AGENTD_LOG_LEVEL": "warning",
                },
            ).start()
            http = httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", headers={"authorization": f"Bearer {TOKEN}"}
            )
            for _ in range(200):
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            pool = await dbpool.create_pool(tdb.url, max_size=2)
            db = await asyncpg.connect(tdb.url)
            lc = Lifecycle(pool, agents.registry(), Settings(log_level="warning"))
            llm_url = f"http://127.0.0.1:{llm.port}"
            for i in range(a.n * 2):
                action = "stop" if i % 2 == 0 else "pause"
                loop = await lc.start(
                    agent="http", message="go", state={"llm": llm_url, "stream": True}
                )
                for _ in range(2000):
                    if await db.fetchval(
                        "SELECT 1 FROM messages WHERE loop_id = $1 AND"
                        " status = 'processing' AND length(content) > 0",
                        loop.id,
                    ):
                        break
                    await asyncio.sleep(0.005)
                n_disc = len(events(ev, "disconnect"))
                t0 = time.time()
                r = await http.post(f"/v1/loops/{loop.id}/{action}")
                t_resp = time.time()
                t_disc = None
                for _ in range(1000):
                    d = events(ev, "disconnect")
                    if len(d) > n_disc:
                        t_disc = d[n_disc]
                        break
                    await asyncio.sleep(0.005)
                res = {
                    "action": action,
                    "http_status": r.status_code,
                    "api_s": t_resp - t0,
                    "close_s": (t_disc - t0) if t_disc else None,
                }
                results.append(res)
                print(
                    f"  control {action}: HTTP {r.status_code} in {res['api_s'] * 1e3:.0f} ms,"
                    f" LLM connection closed after {res['close_s']}",
                    flush=True,
                )
            await http.aclose()
            await pool.close()
            await db.close()
            api.stop()
            w.stop()
            cal.run("after")
    finally:
        llm.stop()
    L = cal.L(True)
    rows = []
    for action in ("stop", "pause"):
        xs = [r["close_s"] for r in results if r["action"] == action and r["close_s"] is not None]
        api_s = [r["api_s"] for r in results if r["action"] == action]
        n = sum(r["action"] == action for r in results)
        rows.append(
            [
                action,
                n,
                len(xs),
                pct(xs, 50) * 1e3,
                pct(xs, 95) * 1e3,
                pct(xs, 95) / 1.0,
                "≤1",
                "ok" if xs and len(xs) == n and pct(xs, 95) <= 1 else "MISS",
                pct(api_s, 50) * 1e3,
                pct(xs, 50) / L,
            ]
        )
    out = table(
        "Control latency: POST → in-flight LLM connection closed at FakeLLM",
        [
            "action",
            "n",
            "closed",
            "p50 ms",
            "p95 ms",
            "p95 / 1 s",
            "target",
            "",
            "API p50 ms",
            "p50/L",
        ],
        rows,
    )

    def chart(ax: Any) -> None:
        for action in ("stop", "pause"):
            xs = sorted(
                r["close_s"] * 1e3
                for r in results
                if r["action"] == action and r["close_s"] is not None
            )
            ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], marker="o", label=action)
        ax.axvline(1000, color="k", linestyle="--")
        ax.set_xlabel("POST → LLM connection closed (ms)")
        ax.legend()

    save("c9_control", {"calibration": cal.as_json(), "trials": results, "table": out}, chart)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

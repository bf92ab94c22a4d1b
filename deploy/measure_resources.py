"""Measure an `agentd` process's memory and CPU while it runs N loops against a fake LLM.

    python deploy/measure_resources.py --database-url postgresql://postgres@127.0.0.1/postgres \
        [--loops 50] [--command up|worker] [--turn-delay 0.5]

Creates a scratch database, starts `python -m agentd.testing.fake_llm`, starts the agentd
command with the test `calc` agent, starts the loops (two LLM turns and two parallel tool
calls each), samples /proc every 100 ms until every loop completed,
and prints idle RSS, peak RSS (VmHWM), mean and peak CPU (cores). Linux only.
The numbers in docs/deployment.md come from this script.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg

from agentd.db import migrate
from agentd.db import pool as dbpool
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from agentd.testing import agents
from agentd.testing.db import with_database

TICK = os.sysconf("SC_CLK_TCK")


def rules(delay: float) -> list[dict[str, object]]:
    calls = [
        {"name": "add", "arguments": {"a": 1, "b": 2}},
        {"name": "add", "arguments": {"a": 3, "b": 4}},
    ]
    return [
        {
            "match": {"role": "user"},
            "reply": {"tool_calls": calls, "delay_before_first_byte": delay},
        },
        {
            "match": {"role": "tool"},
            "reply": {"content": "The sums are 3 and 7. " * 20, "delay_before_first_byte": delay},
        },
    ]


def sample(pid: int) -> tuple[int, int, float]:
    """(VmRSS kB, VmHWM kB, cpu seconds) of one process."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    kv = {line.split(":")[0]: line.split(":")[1].strip() for line in status if ":" in line}
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / TICK
    return int(kv["VmRSS"].split()[0]), int(kv["VmHWM"].split()[0]), cpu


def spawn(
    tmp: Path, url: str, command: str, turn_delay: float
) -> tuple[subprocess.Popen[bytes], int, subprocess.Popen[bytes]]:
    """Start the fake LLM and the agentd command; (fake, its port, agentd)."""
    (tmp / "rules.json").write_text(json.dumps(rules(turn_delay)))
    fake = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentd.testing.fake_llm",
            "--port",
            "0",
            "--rules",
            str(tmp / "rules.json"),
        ],
        stdout=subprocess.PIPE,
    )
    assert fake.stdout is not None
    port = int(fake.stdout.readline().split()[1])
    (tmp / "agentd.toml").write_text('[agents.calc]\nclass = "agentd.testing.agents:CalcAgent"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(
        AGENTD_DATABASE_URL=url,
        AGENTD_CONFIG=str(tmp / "agentd.toml"),
        AGENTD_API_TOKEN="measure",
        AGENTD_PORT="0",
        AGENTD_LOG_LEVEL="warning",
        AGENTD_LOG_FORMAT="json",
        AGENTD_DATA_DIR=str(tmp / "data"),
    )
    agentd = str(Path(sys.executable).with_name("agentd"))
    with (tmp / "agentd.log").open("wb") as log:
        proc = subprocess.Popen([agentd, command], env=env, stdout=subprocess.DEVNULL, stderr=log)
    return fake, port, proc


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--loops", type=int, default=50)
    ap.add_argument("--command", default="up", choices=["up", "worker"])
    ap.add_argument("--turn-delay", type=float, default=0.5)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="agentd-measure-"))
    dbname = f"agentd_measure_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.database_url)
    await admin.execute(f'CREATE DATABASE "{dbname}"')
    url = with_database(args.database_url, dbname)
    conn = await dbpool.connect(url)
    await migrate.apply(conn)
    await conn.close()

    fake, port, proc = spawn(tmp, url, args.command, args.turn_delay)
    pool = await dbpool.create_pool(url, min_size=1, max_size=4)
    try:
        deadline = time.monotonic() + 30
        while not await pool.fetchval("SELECT count(*) FROM workers"):
            assert proc.poll() is None, (tmp / "agentd.log").read_text()
            assert time.monotonic() < deadline, "agentd did not register a worker"
            await asyncio.sleep(0.1)
        idle_rss, _, cpu0 = sample(proc.pid)
        lifecycle = Lifecycle(pool, agents.registry(), Settings())
        t0 = time.monotonic()
        for i in range(args.loops):
            await lifecycle.start(
                agent="calc", message=f"loop {i}", state={"llm": f"http://127.0.0.1:{port}"}
            )
        peak_cpu, last = 0.0, (t0, cpu0)
        window: list[tuple[float, float]] = [last]
        while True:
            done = await pool.fetchval("SELECT count(*) FROM loops WHERE status = 'completed'")
            failed = await pool.fetchval("SELECT count(*) FROM loops WHERE status = 'failed'")
            now = time.monotonic()
            _, hwm, cpu = sample(proc.pid)
            window.append((now, cpu))
            window = [w for w in window if now - w[0] <= 1.0] or [(now, cpu)]
            if now - window[0][0] > 0.5:
                peak_cpu = max(peak_cpu, (cpu - window[0][1]) / (now - window[0][0]))
            if done + failed >= args.loops:
                break
            assert now - t0 < 300, "loops did not finish"
            await asyncio.sleep(0.1)
        elapsed = time.monotonic() - t0
        rss, hwm, cpu = sample(proc.pid)
        print(
            json.dumps(
                {
                    "command": args.command,
                    "loops": args.loops,
                    "completed": done,
                    "failed": failed,
                    "turn_delay_s": args.turn_delay,
                    "seconds": round(elapsed, 1),
                    "idle_rss_mib": round(idle_rss / 1024, 1),
                    "peak_rss_mib": round(hwm / 1024, 1),
                    "final_rss_mib": round(rss / 1024, 1),
                    "mean_cpu_cores": round((cpu - cpu0) / elapsed, 3),
                    "peak_cpu_cores_1s": round(peak_cpu, 3),
                }
            )
        )
    finally:
        await pool.close()
        proc.terminate()
        proc.wait(timeout=30)
        fake.terminate()
        fake.wait(timeout=10)
        await admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())

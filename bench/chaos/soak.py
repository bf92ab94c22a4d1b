"""Drive the soak: start the fleet and the fakes, start loops through the API, inject faults
for `duration` seconds, let the system quiesce, then check every invariant."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench.chaos import checks
from bench.chaos.fakes import ChaosLLM, ChaosMcp
from bench.chaos.procs import Child, Children, clean_env

READ_TIMEOUT = 1.5  # LLM inactivity timeout: a stall is noticed this fast
API_TOKEN = "chaos-api-token-" + uuid.uuid4().hex
MCP_TOKEN = "chaos-mcp-token-" + uuid.uuid4().hex
AGENTS = ("calc", "calc_seq", "ext_par", "ext_seq")

ENV = {
    "AGENTD_HEARTBEAT_INTERVAL": "0.2",
    "AGENTD_LEASE_MARGIN": "2",
    "AGENTD_LIVENESS_INTERVAL": "0.2",
    "AGENTD_POLL_INTERVAL": "0.2",
    "AGENTD_REAPER_INTERVAL": "0.5",
    "AGENTD_QUEUED_REAP_THRESHOLD": "5",
    "AGENTD_SHUTDOWN_GRACE": "1",
    "AGENTD_DEFAULT_READ_TIMEOUT": str(READ_TIMEOUT),
    "AGENTD_DEFAULT_TOOL_TIMEOUT": "5",
    "AGENTD_STREAM_FLUSH_INTERVAL": "0.1",
    "AGENTD_LLM_RETRIES": "4",
    "AGENTD_LLM_RETRY_BASE_DELAY": "0.05",
    "AGENTD_LLM_RETRY_MAX_DELAY": "0.5",
    "AGENTD_LOG_FORMAT": "json",
    "AGENTD_LOG_LEVEL": "warning",
}


def config(llm: str, mcp: str) -> str:
    ext = """
[agents.{name}]
dialect = "{dialect}"
base_url = "{llm}"
model = "fake-model"
api_key_env = "CHAOS_LLM_KEY"
streaming = {streaming}
sequential_tool_calls = {sequential}
max_steps = 10

[[agents.{name}.mcps]]
name = "ext"
url = "{mcp}"
api_token_env = "CHAOS_MCP_TOKEN"
timeout = 5
"""
    return (
        '[agents.calc]\nclass = "agentd.testing.agents:CalcAgent"\n\n'
        '[agents.calc_seq]\nclass = "agentd.testing.agents:SequentialCalcAgent"\n'
        + ext.format(
            name="ext_par",
            dialect="open_ai",
            llm=llm,
            mcp=mcp,
            streaming="true",
            sequential="false",
        )
        + ext.format(
            name="ext_seq",
            dialect="anthropic",
            llm=llm,
            mcp=mcp,
            streaming="false",
            sequential="true",
        )
    )


@dataclass
class Options:
    database_url: str
    workdir: Path
    loops: int = 200
    duration: float = 60.0  # seconds of fault injection
    workers: int = 3
    seed: int = 1
    llm_fault_rate: float = 0.05
    mcp_fail_rate: float = 0.05
    kill_every: tuple[float, float] = (1.5, 4.0)
    mcp_restart_every: tuple[float, float] = (4.0, 8.0)
    quiesce_within: float = 120.0


@dataclass
class Result:
    findings: checks.Findings
    faults: collections.Counter[str]
    seconds: float
    logs: str = ""
    notes: list[str] = field(default_factory=list)


async def run(opts: Options) -> Result:
    rng = random.Random(opts.seed)
    started = time.monotonic()
    faults: collections.Counter[str] = collections.Counter()
    llm = ChaosLLM(
        fault_rate=opts.llm_fault_rate, stall_seconds=READ_TIMEOUT * 4, seed=opts.seed, width=3
    )
    mcp = ChaosMcp(token=MCP_TOKEN, fail_rate=opts.mcp_fail_rate, seed=opts.seed + 1)
    await llm.start()
    await mcp.start()
    cfg = opts.workdir / "chaos.toml"
    cfg.write_text(config(llm.base_url, mcp.url))
    env = clean_env(
        {
            **ENV,
            "AGENTD_DATABASE_URL": opts.database_url,
            "AGENTD_CONFIG": str(cfg),
            "AGENTD_DATA_DIR": str(opts.workdir / "data"),
            "AGENTD_API_TOKEN": API_TOKEN,
            "AGENTD_PORT": "0",
            "CHAOS_LLM_KEY": "chaos-llm-key",
            "CHAOS_MCP_TOKEN": MCP_TOKEN,
        }
    )
    kids = Children(opts.workdir, env)
    dead_pids: set[int] = set()
    try:
        api_port = _free_port()
        kids.env = {**env, "AGENTD_PORT": str(api_port)}
        await kids.start("api", "api")
        kids.env = env
        workers = [await kids.start(f"worker-{i}", "worker") for i in range(opts.workers)]
        base = f"http://127.0.0.1:{api_port}"
        headers = {"Authorization": f"Bearer {API_TOKEN}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
            await _until(lambda: _ready(http), within=60, what="api ready")
            stop = asyncio.Event()
            n = [opts.workers]

            async def killer() -> None:
                while not stop.is_set():
                    await _pause(stop, rng.uniform(*opts.kill_every))
                    if stop.is_set():
                        return
                    live = [w for w in workers if w.alive]
                    if not live:  # they exited by themselves: a finding at the end
                        workers.append(await kids.start(f"worker-{n[0]}", "worker"))
                        n[0] += 1
                        continue
                    victim = rng.choice(live)
                    sig = signal.SIGKILL if rng.random() < 0.7 else signal.SIGTERM
                    victim.signal(sig)
                    dead_pids.add(victim.pid)
                    faults["sigkill" if sig == signal.SIGKILL else "sigterm"] += 1
                    workers.remove(victim)
                    workers.append(await kids.start(f"worker-{n[0]}", "worker"))
                    n[0] += 1

            async def mcp_restarter() -> None:
                while not stop.is_set():
                    await _pause(stop, rng.uniform(*opts.mcp_restart_every))
                    if stop.is_set():
                        return
                    await mcp.restart(down_for=rng.uniform(0.2, 1.0))
                    faults["mcp_restart"] += 1

            async def starter() -> list[uuid.UUID]:
                ids: list[uuid.UUID] = []
                spread = opts.duration * 0.6 / max(1, opts.loops)
                for i in range(opts.loops):
                    agent = AGENTS[i % len(AGENTS)]
                    state: dict[str, Any] = {}
                    if agent.startswith("calc"):
                        state = {"llm": llm.base_url, "stream": bool(rng.random() < 0.5)}
                    body = {"agent": agent, "message": f"chaos {i}", "state": state}
                    r = await http.post("/v1/loops", json=body)
                    if r.status_code != 201:
                        raise AssertionError(f"start loop: {r.status_code} {r.text}")
                    ids.append(uuid.UUID(r.json()["id"]))
                    await asyncio.sleep(spread)  # pacing the load, not waiting on anything
                return ids

            tasks = [asyncio.create_task(killer()), asyncio.create_task(mcp_restarter())]
            loop_ids = await starter()
            await _pause(stop, max(0.0, opts.duration - (time.monotonic() - started)))
            stop.set()
            await asyncio.gather(*tasks)
            # Quiesce: no more faults; every loop must now settle without help.
            llm.fault_rate = 0.0
            mcp.fail_rate = 0.0
            settled = await _wait_settled(opts.database_url, loop_ids, opts.quiesce_within)
            faults.update(llm.faults)
            faults["mcp_500"] = mcp.failures
            await _read_everything(http, loop_ids)
        notes = [] if settled else [f"not settled within {opts.quiesce_within}s"]
        # Stop workers before reading leases, so a live worker's lease is not a finding.
        await kids.stop_all()
        conn = await asyncpg.connect(opts.database_url)
        try:
            findings = await checks.inspect(conn, loop_ids, mcp.effects, dead_pids)
        finally:
            await conn.close()
        crashed = [c.name for c in kids.all if c.pid not in dead_pids and _bad_exit(c)]
        for name in crashed:
            findings.violations.append(f"{name} exited abnormally")
        return Result(
            findings, faults, time.monotonic() - started, logs=_logs(kids.all), notes=notes
        )
    finally:
        await kids.stop_all()
        await llm.stop()
        await mcp.close()


def _bad_exit(c: Child) -> bool:
    return c.proc.returncode not in (0, None, -signal.SIGTERM)


def _logs(children: list[Child]) -> str:
    return "\n".join(c.tail() for c in children)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _ready(http: httpx.AsyncClient) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return (await http.get("/readyz")).status_code == 200
    return False


async def _until(check: Any, *, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s")
        await asyncio.sleep(0.1)


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    """Wait `seconds` (the fault schedule) unless the soak is stopping."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def _wait_settled(url: str, loop_ids: list[uuid.UUID], within: float) -> bool:
    conn = await asyncpg.connect(url)
    try:

        async def settled() -> bool:
            n = await conn.fetchval(
                "SELECT count(*) FROM loops WHERE id = ANY($1::uuid[]) "
                "AND status = ANY($2::text[])",
                loop_ids,
                list(checks.STUCK),
            )
            return n == 0

        with contextlib.suppress(AssertionError):
            await _until(settled, within=within, what="loops settled")
            return True
        return False
    finally:
        await conn.close()


async def _read_everything(http: httpx.AsyncClient, loop_ids: list[uuid.UUID]) -> None:
    """The API must answer every loop's routes with 200 after the storm."""
    for loop_id in loop_ids:
        for path in ("", "/messages", "/events"):
            r = await http.get(f"/v1/loops/{loop_id}{path}")
            if r.status_code != 200:
                raise AssertionError(f"GET /v1/loops/{loop_id}{path}: {r.status_code} {r.text}")

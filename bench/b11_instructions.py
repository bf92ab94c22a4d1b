"""B11 in instructions: CPU per job that a noisy box cannot move.

B11's CPU-per-job figures drift ±30 % between minutes on a shared VM, more than most single
changes save. Here the same scenario (B11's CLI worker and API, TOML agent, loops started
over REST, the HTTP fakes; the bare loop) runs with the measured process under valgrind's
callgrind, which counts the instructions it executes: the same code and work give the same
count whatever else the box is doing. Instrumentation is switched on after a warmup (the
first loops' one-off work stays out) and off after `--jobs` more jobs; the count is
divided by the jobs finished in between.

Instructions are not time (a cache miss costs no instruction), so this complements B11's
wall-clock figures, it does not replace them: use it to compare two trees (`--agentd-src`)
or agentd with the bare loop, then confirm the turns/s with B11 itself.

    python -m bench.b11_instructions [--jobs 1000 --warmup-jobs 300] [--agentd-src DIR]
                                     [--only agentd|bare] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from bench.b11_userpath import (
    AGENTD,
    SrcDB,
    agentd_env,
    bare_argv,
    bare_counter,
    bare_env,
    free_port,
    rules,
    spawn,
    start_loops,
    toml_agent,
    wait_http,
)
from bench.common import PY, RESULTS, ROOT, ThrowawayDB, fake_llm, fake_mcp, save, table

VALGRIND = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--vgdb=yes"]


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def instructions(out: Path) -> int | None:
    """The `Ir` total of a callgrind dump: its `totals:` line (a dump's `summary:` header
    can read 0), else the summary."""
    found: dict[str, int] = {}
    for line in out.read_text(errors="replace").splitlines():
        m = re.match(r"(totals|summary):\s+(\d+)", line)
        if m:
            found[m.group(1)] = int(m.group(2))
    return found.get("totals", found.get("summary"))


async def window(
    pid: int, count: Callable[[], Awaitable[int]], warmup_jobs: int, jobs: int, deadline: float
) -> tuple[int, float]:
    """Instrument `pid` from `warmup_jobs` jobs on for `jobs` more; (jobs counted, seconds)."""

    async def reach(n: int) -> int:
        while True:
            have = await count()
            if have >= n:
                return have
            if time.monotonic() > deadline:
                raise TimeoutError(f"{have} of {n} jobs before the deadline")
            await asyncio.sleep(0.5)

    await reach(warmup_jobs)
    control(pid, "-i", "on")
    n0, t0 = await count(), time.monotonic()
    n1 = await reach(n0 + jobs)
    control(pid, "-i", "off")
    n1 = max(n1, await count())
    return n1 - n0, time.monotonic() - t0


def dump_total(pid: int, prefix: Path) -> int:
    """Dump the counts so far (`<prefix>.<pid>.1`; the bare file is written at exit)."""
    control(pid, "-d")
    totals = [instructions(d) for d in sorted(prefix.parent.glob(f"{prefix.name}.{pid}.*"))]
    found = [t for t in totals if t is not None]
    if not found:
        raise RuntimeError(f"no callgrind dump with totals for {pid} in {prefix.parent}")
    return sum(found)


def result(
    a: argparse.Namespace, work: Path, jobs: int, seconds: float, total: int
) -> dict[str, Any]:
    """One process's figures; its dumps are removed unless --keep."""
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "dump_dir": str(work) if a.keep else None,
        "jobs": jobs,
        "seconds": seconds,
        "instructions": total,
        "ir_per_job": total / jobs,
    }


async def measure_agentd(a: argparse.Namespace, llm_url: str, mcp_url: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="b11i-"))
    config = work / "agentd.toml"
    config.write_text(toml_agent(llm_url, mcp_url))
    token, port = secrets.token_hex(16), free_port()
    log = RESULTS / "b11i-agentd.log"
    prefix = work / "callgrind.worker"
    loops = (a.warmup_jobs + a.jobs) // 5 + 200  # 5 jobs a loop, and never drained
    async with SrcDB("b11i", a.agentd_src) if a.agentd_src else ThrowawayDB("b11i") as tdb:
        env = agentd_env(tdb.url, port, token, config, a.concurrency)
        cli = [PY, "-m", "agentd"]  # valgrind runs the interpreter, not a script
        if a.agentd_src:
            env["PYTHONPATH"] = a.agentd_src
            cli = [PY, "-P", "-m", "agentd"]
        api = spawn([AGENTD, "api"] if not a.agentd_src else [*cli, "api"], env, log)
        try:
            await wait_http(f"http://127.0.0.1:{port}/healthz")
            await start_loops(f"http://127.0.0.1:{port}", token, loops)
            argv = [*VALGRIND, f"--callgrind-out-file={prefix}.%p", *cli, "worker"]
            worker = spawn(argv, env, log)
            db = await asyncpg.connect(tdb.url)
            try:

                async def count() -> int:
                    n: int = await db.fetchval(
                        "SELECT count(*) FROM messages WHERE role IN ('assistant','tool')"
                    )
                    return n

                jobs, seconds = await window(
                    worker.pid, count, a.warmup_jobs, a.jobs, time.monotonic() + a.timeout
                )
                total = dump_total(worker.pid, prefix)
            finally:
                await db.close()
                worker.terminate()
                worker.wait(60)
        finally:
            api.terminate()
            api.wait(15)
    return result(a, work, jobs, seconds, total)


async def measure_bare(a: argparse.Namespace, llm_url: str, mcp_url: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="b11i-"))
    prefix = work / "callgrind.bare"
    argv = [*VALGRIND, f"--callgrind-out-file={prefix}.%p", *bare_argv(a, llm_url, mcp_url)]
    log = open(RESULTS / "b11i-bare.log", "ab")
    p = subprocess.Popen(  # noqa: ASYNC220 (a bench driver: the spawn is instant)
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT), **bare_env(a)},
    )
    counter, count = bare_counter(p.pid)

    try:
        jobs, seconds = await window(
            p.pid, count, a.warmup_jobs, a.jobs, time.monotonic() + a.timeout
        )
        total = dump_total(p.pid, prefix)
    finally:
        p.terminate()
        p.wait(60)
        counter.unlink(missing_ok=True)
    return result(a, work, jobs, seconds, total)


async def main_async(a: argparse.Namespace) -> None:
    mcp, llm = fake_mcp(), fake_llm(rules())
    llm_url, mcp_url = f"http://127.0.0.1:{llm.port}", f"http://127.0.0.1:{mcp.port}/mcp"
    out: dict[str, Any] = {"args": vars(a)}
    try:
        if a.only in (None, "agentd"):
            out["agentd"] = await measure_agentd(a, llm_url, mcp_url)
            print(
                f"  agentd worker: {out['agentd']['ir_per_job'] / 1e6:.2f} M instr/job", flush=True
            )
        if a.only in (None, "bare"):
            out["bare"] = await measure_bare(a, llm_url, mcp_url)
            print(f"  bare loop:     {out['bare']['ir_per_job'] / 1e6:.2f} M instr/job", flush=True)
    finally:
        llm.stop()
        mcp.stop()
    rows = [[k, v["jobs"], v["ir_per_job"] / 1e6] for k, v in out.items() if k != "args"]
    if "agentd" in out and "bare" in out:
        out["worker_over_bare"] = out["agentd"]["ir_per_job"] / out["bare"]["ir_per_job"]
        rows.append(["worker ÷ bare", "", out["worker_over_bare"]])
    txt = table(
        f"B11 instructions per job (callgrind), concurrency {a.concurrency}",
        ["process", "jobs counted", "M instructions / job"],
        rows,
    )
    save("b11_instructions", {**out, "table": txt})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--warmup-jobs", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--timeout", type=float, default=1800, help="seconds for each process")
    p.add_argument("--only", choices=["agentd", "bare"])
    p.add_argument(
        "--keep", action="store_true", help="keep the callgrind dumps (for callgrind_annotate)"
    )
    p.add_argument("--agentd-src", help="another tree's agentd (see B11's --agentd-src)")
    p.add_argument("--event-loop", default="auto", choices=["auto", "asyncio", "uvloop"])
    a = p.parse_args()
    asyncio.run(main_async(a))


if __name__ == "__main__":
    main()

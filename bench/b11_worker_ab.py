"""B11's worker, two trees turn about: does a change to the worker cost or save CPU per job?

B11's ratios move with the box by ±5 % from one run to the next, so a 3 % change to the
worker cannot be seen by comparing two runs. Here two complete agentd setups (each its own
database, API and `agentd worker`, its loops posted before its worker starts) share the
same fakes, and their workers take turns: each runs for a window while the other is
stopped with SIGSTOP, so the box's drift moves both alike. Reported per tree: the worker's
CPU per job and turns/s over all its windows, and new ÷ old.

    python -m bench.b11_worker_ab --old DIR [--new DIR --rounds 12 --window 2.5]

DIR: a source tree (e.g. `git archive <commit> agentd migrations | tar -x -C DIR`);
--new defaults to this checkout. `--old-env`/`--new-env NAME=VALUE` set a setting for one
side only (the same tree twice, two settings: `--old .`). Windows stay under 3.5 s: the fakes (uvicorn) drop a
keep-alive connection idle for 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg

from bench.b11_userpath import (
    AGENTD,
    SrcDB,
    Window,
    agentd_env,
    free_port,
    rules,
    spawn,
    start_loops,
    toml_agent,
    wait_http,
)
from bench.common import PY, RESULTS, ThrowawayDB, fake_llm, fake_mcp, save, table


class Setup:
    """One tree's database, API and worker (started, then stopped at once)."""

    def __init__(
        self, tag: str, src: str | None, extra_env: list[str] | None = None, session: str = "loop"
    ) -> None:
        self.tag, self.src, self.session = tag, src, session
        self.extra_env = dict(kv.split("=", 1) for kv in extra_env or [])
        self.procs: list[subprocess.Popen[bytes]] = []

    async def start(self, stack: AsyncExitStack, a: argparse.Namespace, llm: str, mcp: str) -> None:
        work = Path(tempfile.mkdtemp(prefix=f"b11ab-{self.tag}-"))
        config = work / "agentd.toml"
        config.write_text(toml_agent(llm, mcp, self.session))
        token, port = secrets.token_hex(16), free_port()
        tdb = await stack.enter_async_context(
            SrcDB("b11ab", self.src) if self.src else ThrowawayDB("b11ab")
        )
        env = agentd_env(tdb.url, port, token, config, a.concurrency)
        env["AGENTD_EVENT_LOOP"] = "auto"
        env.update(self.extra_env)
        cli = [AGENTD]
        if self.src:
            env["PYTHONPATH"] = self.src
            cli = [PY, "-P", "-m", "agentd"]
        RESULTS.mkdir(parents=True, exist_ok=True)
        log = RESULTS / f"b11ab-{self.tag}.log"
        api = spawn([*cli, "api"], env, log)
        self.procs.append(api)
        await wait_http(f"http://127.0.0.1:{port}/healthz")
        await start_loops(f"http://127.0.0.1:{port}", token, a.loops)
        self.worker = spawn([*cli, "worker"], env, log)
        self.procs.append(self.worker)
        self.db = await asyncpg.connect(tdb.url)
        stack.push_async_callback(self.db.close)

        async def count() -> int:
            return int(
                await self.db.fetchval(
                    "SELECT count(*) FROM messages WHERE role IN ('assistant','tool')"
                )
            )

        self.window = Window(count, {"worker": self.worker.pid})

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.worker.pid, sig)

    def stop(self) -> None:
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
            p.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(15)


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    if a.window + 0.5 > 4.0:
        raise SystemExit("--window: at most 3.5 s (the fakes drop idle keep-alive connections)")
    mcp, llm = fake_mcp(), fake_llm(rules())
    llm_url, mcp_url = f"http://127.0.0.1:{llm.port}", f"http://127.0.0.1:{mcp.port}/mcp"
    setups = {
        "old": Setup("old", a.old, a.old_env, a.old_mcp_session),
        "new": Setup("new", a.new, a.new_env, a.new_mcp_session),
    }
    totals = {tag: {"seconds": 0.0, "jobs": 0, "cpu": 0.0} for tag in setups}
    windows: list[dict[str, Any]] = []
    try:
        async with AsyncExitStack() as stack:
            for s in setups.values():
                await s.start(stack, a, llm_url, mcp_url)
                s.signal(signal.SIGSTOP)
            for s in setups.values():  # warm each up alone: first turns, imports, pools
                s.signal(signal.SIGCONT)
                await asyncio.sleep(a.warmup)
                s.signal(signal.SIGSTOP)
            for r in range(a.rounds):
                order = list(setups.items()) if r % 2 == 0 else list(setups.items())[::-1]
                for tag, s in order:
                    s.signal(signal.SIGCONT)
                    await asyncio.sleep(0.5)
                    t0, n0, c0, _ = await s.window.snap()
                    await asyncio.sleep(a.window)
                    t1, n1, c1, _ = await s.window.snap()
                    s.signal(signal.SIGSTOP)
                    jobs, cpu_s = n1 - n0, c1["worker"] - c0["worker"]
                    windows.append(
                        {"tree": tag, "jobs": jobs, "cpu_ms_per_job": 1000 * cpu_s / max(jobs, 1)}
                    )
                    totals[tag]["seconds"] += t1 - t0
                    totals[tag]["jobs"] += jobs
                    totals[tag]["cpu"] += cpu_s
                    left = await s.db.fetchval(
                        "SELECT count(*) FROM loops WHERE status NOT IN"
                        " ('completed', 'failed', 'stopped')"
                    )
                    if left == 0:
                        raise SystemExit(f"{tag}: its loops ran out; pass a larger --loops")
            for s in setups.values():
                s.stop()
    finally:
        for s in setups.values():
            s.stop()
        llm.stop()
        mcp.stop()
    out: dict[str, Any] = {
        tag: {
            "jobs": t["jobs"],
            "turns_per_s": t["jobs"] / t["seconds"],
            "cpu_ms_per_job": 1000 * t["cpu"] / t["jobs"],
        }
        for tag, t in totals.items()
    }
    out["new_over_old_cpu"] = out["new"]["cpu_ms_per_job"] / out["old"]["cpu_ms_per_job"]
    out["new_over_old_turns"] = out["new"]["turns_per_s"] / out["old"]["turns_per_s"]
    out["windows"] = windows
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="the tree to compare against")
    p.add_argument("--new", default=None, help="default: this checkout")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--window", type=float, default=2.5)
    p.add_argument("--warmup", type=float, default=4.0)
    p.add_argument("--loops", type=int, default=4000, help="posted to each tree")
    p.add_argument("--concurrency", type=int, default=16)
    for tag in ("old", "new"):
        p.add_argument(
            f"--{tag}-env",
            action="append",
            metavar="NAME=VALUE",
            help=f"an environment variable for the {tag} tree's agentd (repeatable)",
        )
        p.add_argument(
            f"--{tag}-mcp-session",
            default="default",
            choices=["default", "auto", "loop", "process"],
            help=f"the {tag} tree's MCP `session` key; `default` leaves it out (the only"
            " choice for a tree from before the key existed)",
        )
    a = p.parse_args()
    out = asyncio.run(main_async(a))
    txt = table(
        "B11 worker, two trees turn about",
        ["tree", "jobs", "turns/s", "worker CPU ms/job"],
        [
            [tag, out[tag]["jobs"], round(out[tag]["turns_per_s"], 1), out[tag]["cpu_ms_per_job"]]
            for tag in ("old", "new")
        ],
    )
    txt += (
        f"\nnew ÷ old: CPU per job {out['new_over_old_cpu']:.3f},"
        f" turns/s {out['new_over_old_turns']:.3f}"
    )
    print(txt)
    save("b11_worker_ab", {"args": vars(a), **out, "table": txt})


if __name__ == "__main__":
    main()

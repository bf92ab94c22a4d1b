"""B11's bare loop, two trees turn about: does a change to the shared client code (the LLM and
MCP clients, redaction, the HTTP pool) cost the bare loop anything?

B11's ratios cannot show such a change (the bare loop runs the same code as the worker),
and instructions can mislead (`any(map(...))` counted fewer and ran slower). Here the bare
loop of each tree runs as its own process against the same fakes, each in turn for 2.5-s
windows (the other stopped with SIGSTOP, so the box's drift moves both alike), and the CPU
per job of each is reported.

    python -m bench.b11_bare_ab --old DIR [--new DIR] [--rounds 12 --concurrency 16]

DIR: a source tree (e.g. `git archive <commit> agentd | tar -x -C DIR`); --new defaults to
this checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

from bench.b11_userpath import bare_argv, bare_counter, bare_env, cpu, rules
from bench.common import ROOT, Proc, fake_llm, fake_mcp, save, table


async def main_async(a: argparse.Namespace) -> None:
    mcp, llm = fake_mcp(), fake_llm(rules())
    llm_url, mcp_url = f"http://127.0.0.1:{llm.port}", f"http://127.0.0.1:{mcp.port}/mcp"
    procs: dict[str, Any] = {}
    try:
        for tag, src in (("old", a.old), ("new", a.new)):
            ns = argparse.Namespace(concurrency=a.concurrency, event_loop="auto", agentd_src=src)
            p = Proc(bare_argv(ns, llm_url, mcp_url), env=bare_env(ns)).start(30)
            procs[tag] = (p, bare_counter(p.pid)[1])
            os.kill(p.pid, signal.SIGSTOP)
        totals = {tag: [0.0, 0] for tag in procs}
        for r in range(a.rounds):
            for tag, (p, count) in procs.items():
                os.kill(p.pid, signal.SIGCONT)
                await asyncio.sleep(0.5)
                n0, c0 = await count(), cpu(p.pid)
                await asyncio.sleep(2.5)  # under the fakes' 5-s keep-alive for the stopped one
                n1, c1 = await count(), cpu(p.pid)
                os.kill(p.pid, signal.SIGSTOP)
                if r > 0:  # the first round warms both up
                    totals[tag][0] += c1 - c0
                    totals[tag][1] += n1 - n0
    finally:
        for p, _ in procs.values():
            os.kill(p.pid, signal.SIGCONT)
            p.stop()
        llm.stop()
        mcp.stop()
    out = {tag: {"jobs": n, "cpu_ms_per_job": 1000 * c / n} for tag, (c, n) in totals.items()}
    out["new_over_old"] = out["new"]["cpu_ms_per_job"] / out["old"]["cpu_ms_per_job"]
    txt = table(
        "B11 bare loop, two trees turn about",
        ["tree", "jobs", "CPU ms/job"],
        [[t, out[t]["jobs"], out[t]["cpu_ms_per_job"]] for t in ("old", "new")],
    )
    save(
        "b11_bare_ab",
        {"args": vars(a), **out, "table": txt + f"\nnew ÷ old {out['new_over_old']:.3f}"},
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old", required=True, help="the source tree to compare against")
    p.add_argument("--new", default=str(ROOT), help="default: this checkout")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--concurrency", type=int, default=16)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

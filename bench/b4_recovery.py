"""B4 recovery: SIGKILL an `agentd worker` mid-stream, mid-tool, and between the tool
checkpoint and its continuation; a second worker keeps running; DEFAULT settings (only
the intervals agentd ships with). Metric: SIGKILL → the orphaned work runs again on the
survivor. Also: zero lost turns (every loop completes), the tool is never re-invoked after
its checkpoint, and a completion with the dead worker's token is rejected (0 rows).

    python -m bench.b4_recovery [--n 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from agentd.db import pool as dbpool
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from agentd.states import TransitionReason
from agentd.store import tool_calls as tc_store
from agentd.testing import factories
from agentd.testing.agents import invocations
from bench import agents
from bench.common import PY, Calibration, Proc, ThrowawayDB, fake_llm, pct, save, table

CONFIG = """
[agents.probe]
class = "agentd.testing.agents:ProbeAgent"
"""

RULES = [
    {"match": {"role": "tool"}, "reply": {"content": "done"}},
    {
        "match": {"contains": "stream-kill"},
        "reply": {"content": "s" * 320, "chunk_size": 8, "chunk_delay": 0.05},
    },
    {"match": None, "reply": {"tool_calls": [{"name": "slow_add", "arguments": {"a": 1, "b": 2}}]}},
]


class Fleet:
    def __init__(self, url: str, cfg: str, logdir: Path) -> None:
        self.url, self.cfg, self.logdir = url, cfg, logdir
        self.procs: list[Proc] = []

    def spawn(self) -> Proc:
        p = Proc(
            [PY, "-m", "agentd", "--config", self.cfg, "worker"],
            env={"AGENTD_DATABASE_URL": self.url, "AGENTD_LOG_LEVEL": "warning"},
            wait_listen=False,
            log=self.logdir / "workers.log",
        ).start()
        self.procs.append(p)
        return p

    async def wait_registered(self, db: asyncpg.Connection, n: int) -> None:
        live = {p.pid for p in self.procs if p.p and p.p.poll() is None}
        for _ in range(600):
            pids = {r["pid"] for r in await db.fetch("SELECT pid FROM workers")}
            if len(live & pids) >= n:
                return
            await asyncio.sleep(0.05)
        raise RuntimeError("workers did not register")

    def by_pid(self, pid: int) -> Proc:
        return next(p for p in self.procs if p.pid == pid)

    def stop(self) -> None:
        for p in self.procs:
            p.stop()


async def poll(check: Any, timeout: float = 30, every: float = 0.005) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = await check()
        if v:
            return v
        await asyncio.sleep(every)
    return None


async def trial(
    kind: str, db: asyncpg.Connection, lc: Lifecycle, fleet: Fleet, llm_url: str
) -> dict[str, Any]:
    pdir = Path(tempfile.mkdtemp(prefix="b4-"))
    state: dict[str, Any] = {"llm": llm_url, "probe_dir": str(pdir)}
    msg = {"stream": "stream-kill", "tool": "tool-kill", "ckpt": "ckpt-kill"}[kind]
    if kind == "stream":
        state["stream"] = True
    if kind == "tool":
        (pdir / "hold").touch()
    if kind == "ckpt":
        (pdir / "crash_after_checkpoint").touch()
    loop = await lc.start(agent="probe", message=msg, state=state)
    res: dict[str, Any] = {"kind": kind, "loop": str(loop.id)}
    stale_ok = None
    if kind == "stream":
        row = await poll(
            lambda: db.fetchrow(
                "SELECT l.worker_id, l.execution_token, w.pid FROM loops l JOIN workers w ON"
                " w.id = l.worker_id JOIN messages m ON m.loop_id = l.id AND m.status='processing'"
                " WHERE l.id = $1 AND length(m.content) > 0",
                loop.id,
            )
        )
        victim = fleet.by_pid(row["pid"])
        t_kill = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        got = await poll(
            lambda: db.fetchval(
                "SELECT 1 FROM loops WHERE id = $1 AND worker_id IS NOT NULL AND worker_id <> $2",
                loop.id,
                row["worker_id"],
            )
        )
        t_rec = time.monotonic()
        async with dbpool.transaction(lc.pool) as conn:
            stale_ok = (
                await factories.finalize_answer(
                    conn, loop.id, row["execution_token"], content="stale", tokens=(0, 0, 0)
                )
                is None
            )
    elif kind == "tool":
        first = await poll(lambda: asyncio.sleep(0, invocations(pdir)))
        tcrow = await db.fetchrow(
            "SELECT id, lease_token FROM tool_calls WHERE loop_id = $1", loop.id
        )
        victim = fleet.by_pid(first[0]["pid"])
        t_kill = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        got = await poll(lambda: asyncio.sleep(0, len(invocations(pdir)) >= 2))
        t_rec = time.monotonic()
        async with dbpool.transaction(lc.pool) as conn:
            stale_ok = (
                await tc_store.checkpoint(
                    conn,
                    tool_call_id=tcrow["id"],
                    lease_token=tcrow["lease_token"],
                    result="stale",
                    structured=None,
                    is_success=True,
                    error_message=None,
                    duration=0.0,
                )
                is None
            )
        (pdir / "hold").unlink()
    else:
        last: dict[str, Any] = {}

        async def dead() -> Any:
            r = await db.fetchrow(
                "SELECT t.id, t.lease_token, l.execution_token AS generation"
                " FROM tool_calls t JOIN loops l ON l.id = t.loop_id WHERE t.loop_id = $1",
                loop.id,
            )
            if r and r["lease_token"]:
                last.update(r)
            return next(
                (
                    p
                    for p in fleet.procs
                    if p.p and p.p.poll() is not None and not getattr(p, "_seen", False)
                ),
                None,
            )

        victim = await poll(dead, every=0.002)
        victim._seen = True  # type: ignore[attr-defined]
        t_kill = time.monotonic()
        (pdir / "crash_after_checkpoint").unlink()
        got = await poll(
            lambda: db.fetchval(
                "SELECT 1 FROM tool_calls t JOIN workers w ON w.id = t.lease_worker_id"
                " WHERE t.loop_id = $1 AND w.pid <> $2 OR (t.loop_id = $1 AND"
                " t.response_message_id IS NOT NULL)",
                loop.id,
                victim.pid,
            )
        )
        t_rec = time.monotonic()
        if last:
            async with dbpool.transaction(lc.pool) as conn:
                stale_ok = (
                    await tc_store.finish(
                        conn,
                        tool_call_id=last["id"],
                        loop_id=loop.id,
                        lease_token=last["lease_token"],
                        generation=last["generation"],
                        checkpoint=None,
                        sequential=False,
                        new_token=uuid.uuid4(),
                        status_reason=TransitionReason.TOOLS_RESOLVED,
                        llm_lease_seconds=None,
                        tool_lease_seconds=None,
                        notify_llm=False,
                        notify_tool=False,
                        call_events=[],
                        attach=[],
                    )
                    is None
                )
    res["recovered"] = bool(got)
    res["recovery_s"] = t_rec - t_kill if got else None
    res["stale_rejected"] = stale_ok
    fleet.procs.remove(victim)
    fleet.spawn()
    await fleet.wait_registered(db, 2)
    done = await poll(
        lambda: db.fetchval(
            "SELECT status FROM loops WHERE id = $1 AND status IN ('completed','failed')", loop.id
        ),
        timeout=60,
        every=0.05,
    )
    res["final_status"] = done
    res["invocations"] = len(invocations(pdir)) if kind != "stream" else None
    print(
        f"  B4 {kind}: recovery {res['recovery_s']}, stale rejected {stale_ok}, final {done},"
        f" invocations {res['invocations']}",
        flush=True,
    )
    return res


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    llm = fake_llm(RULES)
    llm_url = f"http://127.0.0.1:{llm.port}"
    logdir = Path(tempfile.mkdtemp(prefix="b4log-"))
    cfg = logdir / "agentd.toml"
    cfg.write_text(CONFIG)
    results: list[dict[str, Any]] = []
    s = Settings()
    try:
        async with ThrowawayDB("b4") as tdb:
            cal = Calibration(tdb.url, [(True, 1)], seconds=3)
            cal.run("before")
            db = await asyncpg.connect(tdb.url)
            pool = await dbpool.create_pool(tdb.url, max_size=4)
            lc = Lifecycle(pool, agents.registry(), s)
            fleet = Fleet(tdb.url, str(cfg), logdir)
            fleet.spawn()
            fleet.spawn()
            await fleet.wait_registered(db, 2)
            try:
                for kind in ("stream", "tool", "ckpt"):
                    for _ in range(a.n):
                        results.append(await trial(kind, db, lc, fleet, llm_url))
            finally:
                fleet.stop()
                await pool.close()
                await db.close()
            cal.run("after")
    finally:
        llm.stop()
    rows = []
    for kind in ("stream", "tool", "ckpt"):
        rs = [r for r in results if r["kind"] == kind]
        xs = [r["recovery_s"] for r in rs if r["recovery_s"] is not None]
        p95 = pct(xs, 95)
        rows.append(
            [
                kind,
                len(rs),
                sum(r["recovered"] for r in rs),
                pct(xs, 50),
                p95,
                max(xs) if xs else None,
                p95 / s.liveness_interval if xs else None,
                "ok" if xs and p95 <= 5 else "MISS",
                sum(r["final_status"] == "completed" for r in rs),
                sum(bool(r["stale_rejected"]) for r in rs),
                sum((r["invocations"] or 1) > (2 if kind == "tool" else 1) for r in rs),
            ]
        )
    out = table(
        f"B4 recovery after SIGKILL (default settings: liveness {s.liveness_interval}s, "
        f"heartbeat {s.heartbeat_interval}s, reaper {s.reaper_interval}s)",
        [
            "kill point",
            "n",
            "recovered",
            "p50 s",
            "p95 s",
            "max s",
            "p95/liveness_interval",
            "≤5 s",
            "completed",
            "stale rejected",
            "extra invocations",
        ],
        rows,
    )

    def chart(ax: Any) -> None:
        for kind in ("stream", "tool", "ckpt"):
            xs = sorted(r["recovery_s"] for r in results if r["kind"] == kind and r["recovery_s"])
            ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], marker="o", label=kind)
        ax.axvline(5, color="k", linestyle="--")
        ax.set_xlabel("SIGKILL → reclaimed by survivor (s)")
        ax.set_ylabel("CDF")
        ax.legend()

    save(
        "b4_recovery",
        {
            "calibration": cal.as_json(),
            "trials": results,
            "table": out,
            "settings": {
                "liveness_interval": s.liveness_interval,
                "heartbeat_interval": s.heartbeat_interval,
                "poll_interval": s.poll_interval,
            },
        },
        chart,
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()

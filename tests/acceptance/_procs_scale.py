"""Real `agentd` processes for the scale-out, PgBouncer and rolling-upgrade acceptance tests.

Each process runs the installed `agentd` command (or `python -m` on a script), with a
clean environment (no stray AGENTD_* from the caller), a TOML config that registers the
test `calc` agent, and its output in a log file that is printed when a test fails.
Nothing here sleeps to wait: every wait polls a condition against a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentd.db.pool import Pool, connection

CALC_CONFIG = """\
[agents.calc]
class = "agentd.testing.agents:CalcAgent"
"""

#: Small intervals so a test sees heartbeats, liveness and polls within a second.
FAST_ENV = {
    "AGENTD_HEARTBEAT_INTERVAL": "0.2",
    "AGENTD_LEASE_MARGIN": "2",
    "AGENTD_LIVENESS_INTERVAL": "0.2",
    "AGENTD_POLL_INTERVAL": "0.2",
    "AGENTD_REAPER_INTERVAL": "0.5",
    "AGENTD_LLM_RETRY_BASE_DELAY": "0.05",
    "AGENTD_LLM_RETRY_MAX_DELAY": "0.5",
    "AGENTD_LOG_FORMAT": "json",
    "AGENTD_LOG_LEVEL": "info",
}

AGENTD = str(Path(sys.executable).with_name("agentd"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@dataclass
class Proc:
    """One child process with its log file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        log = self.log_path.open("wb")
        try:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def returncode(self) -> int | None:
        assert self.popen is not None
        return self.popen.poll()

    def signal(self, sig: signal.Signals) -> None:
        assert self.popen is not None
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    async def wait(self, within: float) -> int:
        """The exit code, polled until `within` seconds have passed."""
        deadline = time.monotonic() + within
        while (rc := self.returncode()) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} still running after {within}s\n{self.tail()}")
            await asyncio.sleep(0.05)
        return rc

    def stop(self) -> None:
        """Best effort at teardown: TERM, then KILL what did not exit."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=5)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return f"--- {self.name} ({self.log_path}) ---\n" + "\n".join(
            self.output().splitlines()[-lines:]
        )


@dataclass
class Fleet:
    """Starts agentd processes against one database; stops all of them at the end."""

    tmp: Path
    env: dict[str, str]
    procs: list[Proc] = field(default_factory=list)

    @classmethod
    def for_database(cls, tmp: Path, database_url: str, **extra: str) -> Fleet:
        config = tmp / "agentd.toml"
        config.write_text(CALC_CONFIG)
        env = {
            **FAST_ENV,
            "AGENTD_DATABASE_URL": database_url,
            "AGENTD_CONFIG": str(config),
            "AGENTD_API_TOKEN": "test-token-" + uuid.uuid4().hex,
            "AGENTD_DATA_DIR": str(tmp / "data"),
            **extra,
        }
        return cls(tmp=tmp, env=env)

    def start(self, name: str, *args: str, argv: list[str] | None = None, **extra: str) -> Proc:
        proc = Proc(
            name=name,
            argv=argv or [AGENTD, *args],
            env=clean_env({**self.env, **extra}),
            log_path=self.tmp / f"{name}.log",
        ).start()
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for p in self.procs:
            p.stop()

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.procs)


@contextlib.contextmanager
def fleet(tmp: Path, database_url: str, **extra: str) -> Iterator[Fleet]:
    f = Fleet.for_database(tmp, database_url, **extra)
    try:
        yield f
    except BaseException:
        sys.stderr.write(f.logs() + "\n")
        raise
    finally:
        f.stop_all()


async def poll(
    check: Callable[[], Awaitable[Any]], *, within: float, what: str, interval: float = 0.1
) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s (last: {last!r})")
        await asyncio.sleep(interval)


async def http_ok(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


async def live_workers(pool: Pool) -> dict[int, dict[str, Any]]:
    """Registered workers, by OS pid."""
    async with connection(pool) as conn:
        rows = await conn.fetch("SELECT * FROM workers WHERE NOT stopping")
    return {r["pid"]: dict(r) for r in rows}


async def status_counts(pool: Pool) -> dict[str, int]:
    async with connection(pool) as conn:
        rows = await conn.fetch("SELECT status, count(*) AS n FROM loops GROUP BY status")
    return {r["status"]: r["n"] for r in rows}


async def all_completed(pool: Pool, n: int) -> bool:
    return (await status_counts(pool)).get("completed", 0) == n


async def assert_exactly_once(pool: Pool, loop_ids: list[uuid.UUID]) -> None:
    """Invariant 3, checked from the rows: one assistant message per (loop, step), one tool
    message per tool call, every tool call answered, nothing left queued."""
    async with connection(pool) as conn:
        loops = await conn.fetch(
            "SELECT id, status, step_count, error_message FROM loops WHERE id = ANY($1::uuid[])",
            loop_ids,
        )
        per_step = await conn.fetch(
            """SELECT loop_id, step, count(*) AS n FROM messages
               WHERE role = 'assistant' AND NOT hidden AND loop_id = ANY($1::uuid[])
               GROUP BY loop_id, step""",
            loop_ids,
        )
        calls = await conn.fetch(
            """SELECT tc.id, tc.loop_id, tc.status, tc.response_message_id,
                      (SELECT count(*) FROM messages m
                       WHERE m.role = 'tool' AND m.tool_call_id = tc.id) AS results
               FROM tool_calls tc WHERE tc.loop_id = ANY($1::uuid[])""",
            loop_ids,
        )
        orphan_results = await conn.fetchval(
            """SELECT count(*) FROM messages m WHERE m.role = 'tool'
               AND m.loop_id = ANY($1::uuid[])
               AND NOT EXISTS (SELECT 1 FROM tool_calls tc WHERE tc.id = m.tool_call_id)""",
            loop_ids,
        )
        jobs_left = await conn.fetchval(
            "SELECT count(*) FROM jobs WHERE loop_id = ANY($1::uuid[])", loop_ids
        )
    assert len(loops) == len(loop_ids)
    not_done = [
        (r["id"], r["status"], r["error_message"]) for r in loops if r["status"] != "completed"
    ]
    assert not_done == [], not_done
    steps: dict[uuid.UUID, dict[int, int]] = {}
    for r in per_step:
        steps.setdefault(r["loop_id"], {})[r["step"]] = r["n"]
    for r in loops:
        got = steps.get(r["id"], {})
        want = {s: 1 for s in range(1, r["step_count"] + 1)}
        if set(got) != set(want):  # steps may be numbered from 0
            want = {s: 1 for s in range(r["step_count"])}
        assert got == want, (r["id"], r["step_count"], got)
    assert calls, "the script makes tool calls"
    bad = [
        (c["id"], c["status"], c["results"])
        for c in calls
        if c["results"] != 1 or c["response_message_id"] is None
    ]
    assert bad == [], bad
    assert orphan_results == 0
    assert jobs_left == 0


@contextlib.asynccontextmanager
async def fake_llm_process(tmp: Path, rules: list[dict[str, Any]]) -> AsyncIterator[str]:
    """`python -m agentd.testing.fake_llm` in its own process; yields its base URL."""
    import json

    path = tmp / "fake_llm_rules.json"
    path.write_text(json.dumps(rules))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentd.testing.fake_llm",
        "--port",
        "0",
        "--rules",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        env=clean_env({}),
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        assert line.startswith(b"LISTENING "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), timeout=10)


# --- PgBouncer ---------------------------------------------------------------------------------


def pgbouncer_binary() -> str | None:
    import shutil

    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
    )


def _pgbouncer_user() -> list[str]:
    """PgBouncer refuses to run as root; drop to an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return []
    import pwd

    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return ["-u", name]
    return []


def _pgbouncer_files(
    upstream_host: str, upstream_port: int, pool_size: int
) -> tuple[Path, Path, int, Path]:
    """(home dir, ini file, port, log file). Outside pytest's 0700 tmp tree: the user
    PgBouncer drops to must reach its files."""
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="agentd-pgbouncer-"))
    home.chmod(0o777)
    port = free_port()
    log_file = home / "pgbouncer.log"
    log_file.touch()
    (home / "userlist.txt").write_text('"postgres" ""\n')
    ini = home / "pgbouncer.ini"
    ini.write_text(
        f"""[databases]
* = host={upstream_host} port={upstream_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {home / "userlist.txt"}
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
log_connections = 1
log_disconnections = 0
logfile = {log_file}
pidfile = {home / "pgbouncer.pid"}
"""
    )
    for f in home.iterdir():
        f.chmod(0o666)
    return home, ini, port, log_file


@contextlib.asynccontextmanager
async def pgbouncer(
    binary: str, tmp: Path, *, upstream_host: str, upstream_port: int, pool_size: int = 8
) -> AsyncIterator[tuple[int, Path]]:
    """A transaction-mode PgBouncer in front of the upstream server; yields (port, log file).

    Trust auth towards clients (the test server trusts local connections too)."""
    import shutil

    home, ini, port, log_file = _pgbouncer_files(upstream_host, upstream_port, pool_size)
    proc = await asyncio.create_subprocess_exec(
        binary,
        *_pgbouncer_user(),
        str(ini),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )

    async def accepting() -> bool:
        if proc.returncode is not None:
            err = await proc.stderr.read() if proc.stderr else b""
            raise AssertionError(
                f"pgbouncer exited {proc.returncode}: {err.decode()}\n"
                + (log_file.read_text() if log_file.exists() else "")
            )
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        await writer.wait_closed()
        return True

    try:
        await poll(accepting, within=20, what="pgbouncer listening", interval=0.05)
        yield port, log_file
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), timeout=10)
        with contextlib.suppress(OSError):
            shutil.copy(log_file, tmp / "pgbouncer.log")
        shutil.rmtree(home, ignore_errors=True)

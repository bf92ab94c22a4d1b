"""Real `agentd worker` / `agentd reap` processes for the crash-recovery acceptance tests.

Every process gets a clean environment (no stray AGENTD_* from the caller), durations
small enough for a test, the test database, and a TOML config that loads the test agents
by class. Output goes to a log file per process, printed when a test fails. Nothing here
sleeps to wait: every wait polls a condition against a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd.db.pool import Pool, connection
from agentd.settings import Settings
from agentd.testing.engine import fast_settings

AGENTD = str(Path(sys.executable).with_name("agentd"))

CONFIG = """\
[agents.calc]
class = "agentd.testing.agents:CalcAgent"

[agents.probe]
class = "agentd.testing.agents:ProbeAgent"
"""

READ_TIMEOUT = 10.0
LEASE_MARGIN = 2.0
LEASE = READ_TIMEOUT + LEASE_MARGIN  # every LLM turn's lease in these tests

ENV = {
    "AGENTD_HEARTBEAT_INTERVAL": "0.2",
    "AGENTD_LEASE_MARGIN": str(LEASE_MARGIN),
    "AGENTD_LIVENESS_INTERVAL": "0.2",
    "AGENTD_POLL_INTERVAL": "0.2",
    "AGENTD_REAPER_INTERVAL": "0.5",
    "AGENTD_SHUTDOWN_GRACE": "2",
    "AGENTD_DEFAULT_READ_TIMEOUT": str(READ_TIMEOUT),
    "AGENTD_DEFAULT_TOOL_TIMEOUT": "10",
    "AGENTD_STREAM_FLUSH_INTERVAL": "0.05",
    "AGENTD_LLM_RETRY_BASE_DELAY": "0.05",
    "AGENTD_LLM_RETRY_MAX_DELAY": "0.5",
    "AGENTD_LOG_FORMAT": "json",
    "AGENTD_LOG_LEVEL": "info",
}


def lifecycle_settings() -> Settings:
    """What the test process uses to start loops: the same lease sizing as the workers."""
    return fast_settings(default_read_timeout=READ_TIMEOUT, lease_margin=LEASE_MARGIN)


@dataclass
class Proc:
    name: str
    proc: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    async def exited(self, within: float) -> int:
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout=within)
        except TimeoutError:
            raise AssertionError(f"{self.name} still running after {within}s") from None

    async def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()

    def tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"--- {self.name} ({self.log_path}) ---\n" + "\n".join(text.splitlines()[-lines:])


@dataclass
class Fleet:
    """Starts agentd processes against one database and stops every one at the end."""

    tmp: Path
    env: dict[str, str]
    procs: list[Proc] = field(default_factory=list)

    async def start(self, name: str, *args: str, **extra_env: str) -> Proc:
        log_path = self.tmp / f"{name}.log"
        with log_path.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                AGENTD,
                *args,
                env={**self.env, **extra_env},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        p = Proc(name, proc, log_path)
        self.procs.append(p)
        return p

    async def worker(self, name: str, pool: Pool, *args: str, **extra_env: str) -> Worker:
        """An `agentd worker`, returned once its heartbeat row is registered."""
        p = await self.start(name, "worker", *args, **extra_env)

        async def registered() -> uuid.UUID | None:
            if p.returncode is not None:
                raise AssertionError(f"{name} exited with {p.returncode}\n{p.tail()}")
            async with connection(pool) as conn:
                return await conn.fetchval("SELECT id FROM workers WHERE pid = $1", p.pid)

        worker_id = await poll(registered, within=30, what=f"{name} registered")
        return Worker(p.name, p.proc, p.log_path, worker_id)

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.procs)


@dataclass
class Worker(Proc):
    worker_id: uuid.UUID | None = None


@contextlib.asynccontextmanager
async def fleet(tmp: Path, database_url: str) -> AsyncIterator[Fleet]:
    config = tmp / "agentd.toml"
    config.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(ENV)
    env.update(
        AGENTD_DATABASE_URL=database_url,
        AGENTD_CONFIG=str(config),
        AGENTD_DATA_DIR=str(tmp / "data"),
        PYTHONUNBUFFERED="1",
    )
    f = Fleet(tmp=tmp, env=env)
    try:
        yield f
    except BaseException:
        sys.stderr.write(f.logs() + "\n")
        raise
    finally:
        await asyncio.gather(*(p.stop() for p in f.procs))


async def poll(
    check: Callable[[], Awaitable[Any]], *, within: float, what: str, interval: float = 0.02
) -> Any:
    """Call `check` until it returns something truthy; fail after `within` seconds."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s (last: {last!r})")
        await asyncio.sleep(interval)


async def loop_row(pool: Pool, loop_id: uuid.UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        row = await conn.fetchrow("SELECT * FROM loops WHERE id = $1", loop_id)
    assert row is not None
    return dict(row)


async def assert_exactly_once(pool: Pool, loop_ids: list[uuid.UUID]) -> None:
    """Invariant 3 from the rows: every loop completed; one visible assistant message per
    (loop, step) for steps 1..step_count; one tool message per tool call and none without
    a call; no job rows; no lease left on anything."""
    async with connection(pool) as conn:
        loops = await conn.fetch(
            "SELECT id, status, step_count, error_message, lease_expires_at, worker_id "
            "FROM loops WHERE id = ANY($1::uuid[])",
            loop_ids,
        )
        steps = await conn.fetch(
            "SELECT loop_id, array_agg(step ORDER BY step) AS steps FROM messages "
            "WHERE role = 'assistant' AND NOT hidden AND loop_id = ANY($1::uuid[]) "
            "GROUP BY loop_id",
            loop_ids,
        )
        calls = await conn.fetch(
            "SELECT tc.id, tc.response_message_id, tc.lease_token, tc.lease_worker_id, "
            "(SELECT count(*) FROM messages m WHERE m.role = 'tool' AND m.tool_call_id = tc.id)"
            " AS results FROM tool_calls tc WHERE tc.loop_id = ANY($1::uuid[])",
            loop_ids,
        )
        orphans = await conn.fetchval(
            "SELECT count(*) FROM messages m WHERE m.role = 'tool' "
            "AND m.loop_id = ANY($1::uuid[]) AND NOT EXISTS "
            "(SELECT 1 FROM tool_calls tc WHERE tc.id = m.tool_call_id)",
            loop_ids,
        )
        processing = await conn.fetchval(
            "SELECT count(*) FROM messages WHERE status = 'processing' "
            "AND loop_id = ANY($1::uuid[])",
            loop_ids,
        )
        jobs_left = await conn.fetchval("SELECT count(*) FROM jobs")
    assert len(loops) == len(loop_ids)
    not_done = [
        (r["id"], r["status"], r["error_message"]) for r in loops if r["status"] != "completed"
    ]
    assert not_done == [], not_done
    by_loop = {r["loop_id"]: list(r["steps"]) for r in steps}
    for r in loops:
        assert by_loop.get(r["id"]) == list(range(1, r["step_count"] + 1)), (r["id"], by_loop)
        assert r["lease_expires_at"] is None and r["worker_id"] is None
    bad = [dict(c) for c in calls if c["results"] != 1 or c["response_message_id"] is None]
    assert bad == [], bad
    assert all(c["lease_token"] is None and c["lease_worker_id"] is None for c in calls)
    assert orphans == 0 and processing == 0 and jobs_left == 0

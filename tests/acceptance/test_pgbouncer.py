"""Behind PgBouncer in transaction mode.

`AGENTD_DATABASE_URL` points at PgBouncer (ordinary pooled queries); `AGENTD_DATABASE_DIRECT_URL`
at PostgreSQL itself (LISTEN and the heartbeat connection, whose backend pid the liveness
check looks up). With the direct URL set, the pool's prepared-statement cache defaults to 0,
which transaction-mode poolers need.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from agentd.db import pool as dbpool
from agentd.db.pool import connection
from agentd.engine.lifecycle import Lifecycle
from agentd.settings import Settings
from agentd.testing import agents
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

from ._procs_scale import (
    all_completed,
    assert_exactly_once,
    fleet,
    free_port,
    http_ok,
    live_workers,
    pgbouncer,
    pgbouncer_binary,
    poll,
)

LOOPS = 20


def test_statement_cache_is_off_behind_a_pooler_unless_asked() -> None:
    # A transaction-mode pooler (signalled by a separate direct URL) needs it off.
    direct = "postgresql://db:5432/agentd"
    assert Settings(database_direct_url=direct).statement_cache_size() == 0
    assert Settings().statement_cache_size() == 100
    asked = Settings(database_direct_url=direct, db_statement_cache_size=50)
    assert asked.statement_cache_size() == 50
    assert Settings(db_statement_cache_size=0).statement_cache_size() == 0


@pytest.mark.acceptance
@pytest.mark.timeout(180)
async def test_worker_and_api_run_loops_through_transaction_mode_pgbouncer(
    tmp_path: Path, database_url: str
) -> None:
    binary = pgbouncer_binary()
    if binary is None:
        pytest.skip("pgbouncer binary not installed (Debian: apt-get install -y pgbouncer)")
    upstream = urlsplit(database_url)
    dbname = upstream.path.lstrip("/")
    async with pgbouncer(
        binary,
        tmp_path,
        upstream_host=upstream.hostname or "127.0.0.1",
        upstream_port=upstream.port or 5432,
    ) as (bport, _):
        user = upstream.username or "postgres"
        pooled_url = urlunsplit(upstream._replace(netloc=f"{user}@127.0.0.1:{bport}"))
        # The test itself also goes through the pooler, with the cache off.
        pool = await dbpool.create_pool(pooled_url, min_size=1, max_size=4, statement_cache_size=0)
        try:
            async with FakeLLM() as fake:
                fake.add(
                    Rule(
                        match=lambda last: last.role == "user",
                        reply=Reply(
                            tool_calls=[
                                ToolCall("add", {"a": 1, "b": 2}),
                                ToolCall("add", {"a": 3, "b": 4}),
                            ]
                        ),
                    )
                )
                fake.add(
                    Rule(
                        match=lambda last: last.role == "tool", reply=Reply(content="sums: 3 and 7")
                    )
                )
                port = free_port()
                with fleet(
                    tmp_path,
                    pooled_url,
                    AGENTD_DATABASE_DIRECT_URL=database_url,
                    AGENTD_PORT=str(port),
                    AGENTD_DB_POOL_MAX="4",
                    AGENTD_SHUTDOWN_GRACE="2",
                ) as f:
                    api = f.start("api", "api")
                    worker = f.start("worker", "worker")
                    await poll(
                        lambda: http_ok(f"http://127.0.0.1:{port}/readyz"),
                        within=30,
                        what="api /readyz through pgbouncer",
                    )

                    async def registered() -> bool:
                        return worker.pid in await live_workers(pool)

                    await poll(registered, within=30, what="worker registered")
                    lifecycle = Lifecycle(pool, agents.registry(), Settings())
                    ids = [
                        (
                            await lifecycle.start(
                                agent="calc", message=f"go {i}", state={"llm": fake.base_url}
                            )
                        ).id
                        for i in range(LOOPS)
                    ]
                    await poll(
                        lambda: all_completed(pool, LOOPS),
                        within=60,
                        what="every loop completed through pgbouncer",
                    )
                    await assert_exactly_once(pool, ids)

                    # The heartbeat (and so the liveness check's backend pid) is direct.
                    async with connection(pool) as conn:
                        app = await conn.fetchval(
                            "SELECT a.application_name FROM workers w JOIN pg_stat_activity a "
                            "ON a.pid = w.backend_pid AND a.backend_start = w.backend_start "
                            "WHERE w.pid = $1",
                            worker.pid,
                        )
                    assert app == "agentd-heartbeat"

                    for p in (worker, api):
                        p.signal(signal.SIGTERM)
                    for p in (worker, api):
                        assert await p.wait(within=30) == 0, p.tail()
                    for p in (worker, api):
                        out = p.output()
                        assert "prepared statement" not in out, p.tail()
                        assert '"level": "error"' not in out, p.tail()
        finally:
            await pool.close()
    # Ordinary queries really went through PgBouncer: it logged the clients' logins.
    log_text = (tmp_path / "pgbouncer.log").read_text()
    logins = re.findall(rf"login attempt: db={re.escape(dbname)} ", log_text)
    assert len(logins) >= 3, log_text[-2000:]

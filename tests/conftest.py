from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog

from agentd import redact
from agentd.db import pool as dbpool
from agentd.testing.db import TestDatabases, server_url


def pytest_configure(config: pytest.Config) -> None:
    # structlog's default console renderer draws exceptions with rich, locals included: for a
    # turn failing inside the engine that is ~900 lines (the whole Settings, the context),
    # rendered on the event loop — 5 s on a loaded 2-core box, which made a test waiting 5 s
    # for the failure to commit fail. agentd's own processes use logs.configure() (a plain
    # traceback); tests keep structlog's defaults but with the plain formatter.
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.StackInfoRenderer(),
            structlog.dev.set_exc_info,
            structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False),
            structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback),
        ]
    )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[tuple[str, TestDatabases]]:
    """One server and one migrated template for the whole session."""
    loop = asyncio.new_event_loop()
    tmp = Path(tempfile.mkdtemp(prefix="agentd-tests-"))
    cm = server_url(tmp)
    url = loop.run_until_complete(cm.__aenter__())
    dbs = TestDatabases(url)
    loop.run_until_complete(dbs.setup())
    try:
        yield url, dbs
    finally:
        loop.run_until_complete(dbs.teardown())
        loop.run_until_complete(cm.__aexit__(None, None, None))
        loop.close()


@pytest.fixture
async def database_url(pg_server: tuple[str, TestDatabases]) -> AsyncIterator[str]:
    """A fresh, migrated database for this test."""
    _, dbs = pg_server
    url = await dbs.create()
    try:
        yield url
    finally:
        await dbs.drop(url)


@pytest.fixture
async def empty_database_url(pg_server: tuple[str, TestDatabases]) -> AsyncIterator[str]:
    _, dbs = pg_server
    url = await dbs.create(migrated=False)
    try:
        yield url
    finally:
        await dbs.drop(url)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[dbpool.Pool]:
    p = await dbpool.create_pool(database_url, min_size=1, max_size=8)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture(autouse=True)
def known_secrets() -> Iterator[redact.KnownSecrets]:
    """Each test starts with its own known secrets, as a process does: the engines and apps
    it makes take them as theirs (redact.installed), and nothing it makes known outlives
    it (another test's streamed text is never held back for this one's secret)."""
    with redact.installed(redact.KnownSecrets()) as known:
        yield known


@pytest.fixture(autouse=True)
def _no_agentd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests build their own Settings; stray AGENTD_* env vars must not leak in.
    for key in list(os.environ):
        if key.startswith("AGENTD_") and not key.startswith("AGENTD_TEST_"):
            monkeypatch.delenv(key, raising=False)


#: Test files marked `slow` here, by what they are (see "Run the tests" in README.md): the
#: README's `pytest` deselects them (pyproject addopts), `.ci/run` runs them as a second
#: invocation (`pytest -m slow`). A file may also mark single tests `slow` itself.
SLOW_FILES = {
    # crash, chaos and soak runs of real agentd processes (SIGKILL, outages, fleets)
    "acceptance/test_chaos.py",
    "acceptance/test_child_loops_crash.py",
    "acceptance/test_compaction_crash.py",
    "acceptance/test_crash_race.py",
    "acceptance/test_crash_recovery.py",
    "acceptance/test_db_outage.py",
    "acceptance/test_fleet_processes.py",
    "acceptance/test_pgbouncer.py",
    "acceptance/test_rolling_upgrade.py",
    "acceptance/test_scale_out.py",
    "acceptance/test_embedded_and_demo.py",
    # a real browser against the admin UI
    "browser/test_admin_e2e.py",
    # property-based fuzzing with hundreds of generated inputs per test
    "unit/hostile/test_hostile_llm_parsers.py",
    "unit/hostile/test_hostile_tool_results.py",
    "integration/hostile/test_hostile_api.py",
    "integration/api/test_schemathesis.py",
    # third-party MCP peers (npm, the official conformance suite)
    "integration/mcp/test_interop.py",
    "integration/mcp_server/test_mcp_server_peers.py",
    "conformance/test_official_conformance_suite.py",
}


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        try:
            rel = item.path.relative_to(root).as_posix()
        except ValueError:
            continue
        if rel in SLOW_FILES:
            item.add_marker(pytest.mark.slow)

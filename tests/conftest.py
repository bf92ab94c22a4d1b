from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agentd.db import pool as dbpool
from agentd.testing.db import TestDatabases, server_url


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
def _no_agentd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests build their own Settings; stray AGENTD_* env vars must not leak in.
    for key in list(os.environ):
        if key.startswith("AGENTD_") and not key.startswith("AGENTD_TEST_"):
            monkeypatch.delenv(key, raising=False)

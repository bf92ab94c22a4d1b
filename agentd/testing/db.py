"""Isolated test databases: one migrated template, one clone per test.

Uses AGENTD_TEST_DATABASE_URL when set (any database on the server; we create our own),
else one embedded server per test session; AGENTD_TEST_BACKEND=docker uses testcontainers.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from agentd.db import migrate


def with_database(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    if parts.path and parts.path != "/":
        return urlunsplit(parts._replace(path="/" + dbname))
    if not parts.path or parts.path == "/":
        return urlunsplit(parts._replace(path="/" + dbname))
    return url


class TestDatabases:
    """Creates the migrated template once, then cheap clones of it."""

    __test__ = False

    def __init__(self, admin_url: str, prefix: str | None = None) -> None:
        self.admin_url = admin_url
        self.prefix = prefix or f"agentd_t{os.getpid()}"
        self.template = f"{self.prefix}_tpl"
        self._created: list[str] = []

    async def _admin(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.admin_url)

    async def setup(self) -> None:
        conn = await self._admin()
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{self.template}"')
        finally:
            await conn.close()
        tconn = await asyncpg.connect(with_database(self.admin_url, self.template))
        try:
            await migrate.apply(tconn)
        finally:
            await tconn.close()

    async def create(self, *, migrated: bool = True) -> str:
        name = f"{self.prefix}_{uuid.uuid4().hex[:10]}"
        conn = await self._admin()
        try:
            if migrated:
                await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
            else:
                await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        self._created.append(name)
        return with_database(self.admin_url, name)

    async def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        conn = await self._admin()
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    async def teardown(self) -> None:
        conn = await self._admin()
        try:
            for name in [*self._created, self.template]:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def server_url(tmp_dir: Path) -> AsyncIterator[str]:
    """The admin URL of the server the tests use (configured, docker, or embedded)."""
    configured = os.environ.get("AGENTD_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    if os.environ.get("AGENTD_TEST_BACKEND") == "docker":
        from testcontainers.postgres import PostgresContainer

        image = os.environ.get("AGENTD_TEST_POSTGRES_IMAGE", "postgres:16")
        with PostgresContainer(image, driver=None) as pg:
            yield pg.get_connection_url()
        return
    from agentd.db.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(tmp_dir / "embedded-pg")
    url = await server.start()
    try:
        yield url
    finally:
        await server.stop()

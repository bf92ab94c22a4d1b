"""The one place asyncpg exceptions become agentd errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import asyncpg

from agentd.errors import DatabaseUnavailable


@contextlib.contextmanager
def translate_pg_errors() -> Iterator[None]:
    try:
        yield
    except (
        OSError,
        asyncpg.CannotConnectNowError,
        asyncpg.ConnectionDoesNotExistError,
        asyncpg.InterfaceError,
    ) as exc:
        raise DatabaseUnavailable(f"database unavailable: {exc}") from exc

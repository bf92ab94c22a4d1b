"""Wait for the database at startup, and turn connect failures into one-line errors.

Containers start in any order: a worker may come up before its database accepts
connections, or before its host name resolves. `wait_until_reachable` retries what can
heal by itself (refused, unresolvable, starting up, too many connections) with back-off up
to a limit, logging each retry once; what cannot heal (a malformed URL, a missing database,
rejected credentials) fails at once with a message that names the cause.
"""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.parse

import asyncpg

from agentd import logs
from agentd.errors import ConfigError, DatabaseMissing, DatabaseUnavailable

log = logs.get("agentd.db.wait")

#: Failures that a database still starting (or a network still forming) heals.
_TRANSIENT: tuple[type[BaseException], ...] = (
    OSError,  # refused, unreachable, host name not (yet) resolvable
    TimeoutError,
    asyncpg.CannotConnectNowError,  # "the database system is starting up"
    asyncpg.TooManyConnectionsError,
    asyncpg.PostgresConnectionError,
    asyncpg.InternalClientError,
)

_CONNECT_TIMEOUT = 5.0


def where(url: str) -> str:
    """host:port/database of a URL, without credentials (for messages)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or "localhost"
        return f"{host}:{parts.port or 5432}/{parts.path.lstrip('/') or '(default)'}"
    except ValueError:
        return "(unparsable URL)"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, socket.gaierror):
        return f"host name not resolvable ({exc.strerror})"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return f"no answer within {_CONNECT_TIMEOUT:.0f}s"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text


async def _try_once(url: str) -> None:
    conn = await asyncpg.connect(url, timeout=_CONNECT_TIMEOUT, statement_cache_size=0)
    await conn.close()


async def wait_until_reachable(url: str, *, limit: float) -> None:
    """Return once `url` accepts a connection; raise a one-line agentd error otherwise.

    Raises ConfigError (malformed URL), DatabaseMissing (no such database, or the server
    rejected the role or password), DatabaseUnavailable (still unreachable after `limit`
    seconds of retries with back-off: 0.5 s doubling, at most 5 s apart).
    """
    target = where(url)
    deadline = time.monotonic() + limit
    delay = 0.5
    attempt = 0
    while True:
        attempt += 1
        try:
            await _try_once(url)
        except asyncpg.InvalidCatalogNameError:
            raise DatabaseMissing(
                f"database {target} does not exist; create it (createdb) or fix AGENTD_DATABASE_URL"
            ) from None
        except (
            asyncpg.InvalidAuthorizationSpecificationError,
            asyncpg.InvalidPasswordError,
        ) as exc:
            raise DatabaseMissing(
                f"database {target} rejected the connection: {_describe(exc)}"
            ) from None
        except (asyncpg.ClientConfigurationError, ValueError) as exc:
            raise ConfigError(f"AGENTD_DATABASE_URL is not a valid URL: {exc}") from None
        except _TRANSIENT as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DatabaseUnavailable(
                    f"database {target} unreachable: {_describe(exc)} "
                    f"(gave up after {attempt} attempt(s), AGENTD_DATABASE_WAIT={limit:g}s)"
                ) from None
            wait = min(delay, left)
            log.warning(
                "database.waiting",
                target=target,
                attempt=attempt,
                retry_in=round(wait, 1),
                error=_describe(exc),
            )
            await asyncio.sleep(wait)
            delay = min(delay * 2, 5.0)
        else:
            if attempt > 1:
                log.info("database.reachable", target=target, attempts=attempt)
            return

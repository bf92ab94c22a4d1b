"""Idempotency-Key on POST /v1/loops: a retried start answers with the first start's loop.

Same key and same body (as parsed) within `AGENTD_IDEMPOTENCY_KEY_RETENTION`: the loop the
first request started, as it is now. Same key, another body: 422. The key commits with its
loop, so two concurrent requests with one key start one loop: the second waits on the
first's key row, rolls its own start back, and answers with the first's loop.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from agentd.api.problems import ApiProblem
from agentd.api.state import AppState
from agentd.db.pool import Connection, connection, transaction
from agentd.errors import LoopNotFound
from agentd.store import idempotency_keys, loops
from agentd.store.models import Loop

HEADER = "Idempotency-Key"
#: Printable ASCII, as a header value survives every proxy.
KEY_PATTERN = r"^[\x21-\x7e][\x20-\x7e]{0,254}$"


class _KeyTaken(Exception):
    """A concurrent request with the same key committed first."""


def request_hash(body: dict[str, Any]) -> bytes:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).digest()


async def start_once(
    state: AppState,
    *,
    key: str,
    body: dict[str, Any],
    start: Callable[[Connection], Awaitable[Loop]],
) -> tuple[Loop, bool]:
    """The loop for `key`, started by `start` unless a live key has one: (loop, replayed)."""
    window = state.settings.idempotency_key_retention
    digest = request_hash(body)
    try:
        async with transaction(state.pool) as conn:
            found = await idempotency_keys.get(conn, key=key, window=window)
            if found is not None:
                return await _replay(conn, found, digest), True
            loop = await start(conn)
            if not await idempotency_keys.claim(
                conn, key=key, request_hash=digest, loop_id=loop.id, window=window
            ):
                raise _KeyTaken()  # rolls this start back: nothing of it is kept
            return loop, False
    except _KeyTaken:
        pass
    async with connection(state.pool) as conn:
        found = await idempotency_keys.get(conn, key=key, window=window)
        if found is None:  # the winner's loop was deleted in between
            raise LoopNotFound(f"the loop of Idempotency-Key {key!r} no longer exists")
        return await _replay(conn, found, digest), True


async def _replay(conn: Connection, found: idempotency_keys.IdempotencyKey, digest: bytes) -> Loop:
    if found.request_hash != digest:
        raise ApiProblem(
            422,
            f"Idempotency-Key {found.key!r} was used with a different request body "
            f"(for loop {found.loop_id}); use a new key for a new request",
            problem_type="idempotency-key-reused",
            loop_id=str(found.loop_id),
        )
    loop = await loops.get(conn, loop_id=found.loop_id)
    if loop is None:
        raise LoopNotFound(f"the loop of Idempotency-Key {found.key!r} no longer exists")
    return loop

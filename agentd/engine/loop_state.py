"""Writable loop state: a person or a program edits `loops.state` between turns.

Guarantee: a patch applies (RFC 7396 JSON merge patch) only to the version its writer
names (`If-Match`), under the loop's row lock, so two writers can never lose each other's
change; an actual change bumps `state_version` (the 0014 trigger) and records a
`loop.state_changed` event with the patch and both versions in the same transaction.
The next turn reads the new state at its claim.
Tolerates: concurrent patches (they serialize on the row lock; the loser gets 412).
Never: writes while a turn may be reading the state (queued, running: 409).
Called by: the API (PATCH /v1/loops/{id}/state), the admin UI (its State tab).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Set as AbstractSet
from typing import Any

from agentd.db.pool import Pool, transaction
from agentd.errors import (
    InputInvalid,
    InvalidTransition,
    LoopNotFound,
    PreconditionFailed,
    StateTooLarge,
)
from agentd.event_names import EventName
from agentd.states import LoopStatus
from agentd.store import events, loops
from agentd.store.models import Loop, NewEvent

#: A turn (or its tool calls) reads the state: changing it under them is refused.
BUSY = frozenset({LoopStatus.QUEUED, LoopStatus.RUNNING})


def size(state: Any) -> int:
    """A state's size as stored: the UTF-8 bytes of its compact JSON."""
    return len(json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode())


def check_size(state: Any, max_bytes: int | None, *, before: int | None = None) -> None:
    """StateTooLarge if `state` is over `max_bytes` (None: no limit) — unless it shrank from
    `before` bytes: a state already over the limit (the limit was lowered) may be trimmed."""
    if max_bytes is None:
        return
    n = size(state)
    if n > max_bytes and (before is None or n >= before):
        raise StateTooLarge(
            f"the loop's state would be {n} bytes, over the limit of {max_bytes} "
            "(AGENTD_MAX_STATE_BYTES); keep large data elsewhere and store a reference",
            limit=max_bytes,
            size=n,
        )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: objects merge recursively, null deletes a member, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def diff(old: Any, new: dict[str, Any]) -> dict[str, Any]:
    """The merge patch that turns `old` into `new` (members gone from `new` become null).
    A null inside `new` cannot be expressed (RFC 7396 reads it as "delete"): ValueError."""
    base = old if isinstance(old, dict) else {}
    out: dict[str, Any] = {k: None for k in base if k not in new}
    for key, value in new.items():
        if value is None or (isinstance(value, dict) and _has_null(value)):
            raise ValueError(f"{key}: a merge patch cannot set null (it deletes the member)")
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            sub = diff(base[key], value)
            if sub:
                out[key] = sub
        elif base.get(key) != value or key not in base:
            out[key] = value
    return out


def _has_null(obj: dict[str, Any]) -> bool:
    return any(v is None or (isinstance(v, dict) and _has_null(v)) for v in obj.values())


async def patch(
    pool: Pool,
    loop_id: uuid.UUID,
    body: Any,
    *,
    if_match: int | AbstractSet[int] | None,
    by: str = "api",
    max_bytes: int | None = None,
) -> tuple[Loop, bool]:
    """Apply `body` to the loop's state at version `if_match` (None: `*`, any version; a
    set: any of these versions, an empty set matches none — an If-Match list).

    Returns the loop and whether the state changed (a patch that changes nothing writes
    nothing and keeps the version). A result over `max_bytes` is refused (StateTooLarge)
    with nothing written.
    """
    if not isinstance(body, dict):
        raise InputInvalid(
            "the merge patch must be a JSON object (loop state is an object)",
            errors=[{"field": "body", "message": "must be an object"}],
        )
    async with transaction(pool) as conn:
        loop = await loops.get_for_update(conn, loop_id=loop_id)
        if loop is None:
            raise LoopNotFound(f"no loop {loop_id}")
        wanted = {if_match} if isinstance(if_match, int) else if_match
        if wanted is not None and loop.state_version not in wanted:
            named = ", ".join(str(v) for v in sorted(wanted)) or "no version it could match"
            raise PreconditionFailed(
                f"state is at version {loop.state_version}; If-Match named {named}",
                current_version=loop.state_version,
            )
        if loop.status in BUSY:
            raise InvalidTransition(
                f"loop {loop_id} is {loop.status}: its turn reads the state; patch it while "
                "the loop is at rest, waiting or paused",
                current_status=loop.status,
            )
        current = loop.state if isinstance(loop.state, dict) else {}
        merged = merge_patch(current, body)
        if merged == current:
            return loop, False
        check_size(merged, max_bytes, before=size(current))
        row = await loops.set_state(
            conn, loop_id=loop.id, state_version=loop.state_version, state=merged
        )
        assert row is not None  # under the row lock, at the version just read
        log = json.dumps(
            {
                "patch": body,
                "from_version": loop.state_version,
                "to_version": row.state_version,
                "by": by,
            }
        )
        await events.insert_many(
            conn,
            [
                NewEvent(
                    name=EventName.LOOP_STATE_CHANGED,
                    loop_id=loop.id,
                    reason="state_patched",
                    log=log,
                )
            ],
        )
        return row, True

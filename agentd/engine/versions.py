"""Agent versions at run time: recorded at start, applied at turn boundaries.

Guarantee: every process records the versions of the agents it loaded before it claims
anything (idempotent: a version new to the fleet gets one `agent.version_created` event
and webhook, whichever process records it first); a loop's upgrade is applied only when a
turn of it starts on a worker that has the target version (no call of the loop is then
unresolved: a turn boundary), fenced by the turn's token, with a `loop.upgraded` event and
webhook in the same transaction.
Tolerates: any number of processes starting at once (ON CONFLICT, SKIP LOCKED).
Called by: engine.service and `agentd api` (record), engine.worker (apply), lifecycle.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from agentd import logs
from agentd.db.pool import Connection, Pool, transaction
from agentd.event_names import EventName
from agentd.registry import AgentRegistry
from agentd.states import TransitionReason
from agentd.store import agent_versions, events
from agentd.store.models import NewEvent

log = logs.get("agentd.versions")


async def record_in(conn: Connection, registry: AgentRegistry) -> list[str]:
    """Record this process's versions in the caller's transaction; the ids new to the
    fleet (their events, webhooks and `latest` upgrades are written too)."""
    loaded = registry.versions()
    if not loaded:
        return []
    by_id = {v.id: v for v in loaded.values()}
    new = await agent_versions.record(
        conn,
        versions=[
            {"id": v.id, "agent": v.agent, "fingerprint": v.fingerprint, "definition": v.definition}
            for v in loaded.values()
        ],
    )
    notes = []
    for row in new:
        v = by_id[row["id"]]
        moved = await agent_versions.mark_latest(conn, agent=v.agent, version_id=v.id)
        data: dict[str, Any] = {"agent": v.agent, "version": v.id, "latest_upgrades": moved}
        notes.append(NewEvent(name=EventName.AGENT_VERSION_CREATED, log=json.dumps(data)))
        await agent_versions.webhook(
            conn, type_=EventName.AGENT_VERSION_CREATED, loop_id=None, data=data
        )
    await events.insert_many(conn, notes)
    return [r["id"] for r in new]


async def record(pool: Pool, registry: AgentRegistry) -> list[str]:
    """At process start: record the versions; for a version new to the fleet, let its
    agent's loops with no version (made before migrations/0025, or before any process
    knew the agent) run it. A loop is made without one only while no version of its agent
    is recorded, so the first version of an agent adopts them all (a scan of the agent's
    loops, once per new version, never per start)."""
    async with transaction(pool) as conn:
        new = await record_in(conn, registry)
    adopted = 0
    for name, v in registry.versions().items():
        if v.id not in new:
            continue
        async with transaction(pool) as conn:
            adopted += await agent_versions.adopt(conn, agent=name, version_id=v.id)
    log.info(
        "agent.versions_recorded",
        versions={name: v.id for name, v in registry.versions().items()},
        new=new,
        adopted_loops=adopted,
    )
    return new


async def apply_upgrade(
    conn: Connection, *, loop_id: UUID, execution_token: UUID
) -> dict[str, Any] | None:
    """Move a claimed loop to its pending version (the caller checked it can run it);
    None: nothing pending, or the fence failed."""
    row = await agent_versions.apply_upgrade(conn, loop_id=loop_id, execution_token=execution_token)
    if row is None:
        return None
    data = {
        "loop_id": str(loop_id),
        "agent": row["agent"],
        "from": row["from_version"],
        "to": row["to_version"],
        "by": row["requested_by"],
    }
    await events.insert_many(
        conn,
        [
            NewEvent(
                name=EventName.LOOP_UPGRADED,
                loop_id=loop_id,
                reason=TransitionReason.UPGRADED,
                log=json.dumps(data),
            )
        ],
    )
    await agent_versions.webhook(conn, type_=EventName.LOOP_UPGRADED, loop_id=loop_id, data=data)
    return data

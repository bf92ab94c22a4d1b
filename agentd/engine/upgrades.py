"""Moving loops to another agent version on request (POST /v1/loops/{id}/upgrade and
/v1/agents/{name}/upgrade, the admin UI, the client and the CLI).

Guarantee: an upgrade is recorded under the loop's row lock and applied by the worker
when the loop's next turn starts (engine/versions.py): never mid-turn. It is refused
(409 upgrade-would-orphan) when a tool call still unresolved would have another name, or
none, in the target version; a dry run writes nothing and shows the same diff. Every
request is audited: a `loop.upgrade_requested` event naming who asked, then the
`loop.upgraded` event and webhook when it applies.
Called by: the API routes, the admin UI.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from agentd import versions
from agentd.db.pool import Connection, Pool, connection, transaction
from agentd.errors import BadRequest, LoopNotFound, UnknownAgent, UnknownVersion, UpgradeWouldOrphan
from agentd.event_names import EventName
from agentd.states import TransitionReason
from agentd.store import agent_versions, events, loops, mcp, tool_calls
from agentd.store.models import Loop, NewEvent

BULK_PAGE = 200  # loops one bulk request moves; `remaining` says whether to ask again


async def _target(conn: Connection, agent: str, to_version: str | None) -> dict[str, Any]:
    if to_version is None:
        row = await agent_versions.newest(conn, agent=agent)
        if row is None:
            raise UnknownAgent(f"no version of agent {agent!r} is recorded", agent=agent)
        return row
    row = await agent_versions.get(conn, version_id=to_version)
    if row is None:
        raise UnknownVersion(f"no agent version {to_version!r}", version=to_version)
    if row["agent"] != agent:
        raise BadRequest(
            f"version {to_version!r} is agent {row['agent']!r}'s, not {agent!r}'s",
            version=to_version,
        )
    return row


async def plan(conn: Connection, loop: Loop, target: dict[str, Any]) -> dict[str, Any]:
    """What moving `loop` to `target` changes, and the calls it would orphan."""
    current = None
    if loop.agent_version is not None:
        current = await agent_versions.get(conn, version_id=loop.agent_version)
    tools = [
        {"server": t.mcp_name, "name": t.name, "remote_name": t.remote_name}
        for t in await mcp.list_tools(conn, loop_id=loop.id)
    ]
    by_name = {t["name"]: t for t in tools}
    pending = [
        by_name.get(c.name, {"name": c.name, "server": None, "remote_name": c.name})
        for c in await tool_calls.list_unresolved(conn, loop_id=loop.id)
    ]
    old_def = current["definition"] if current else {}
    return {
        "loop_id": str(loop.id),
        "agent": loop.agent,
        "from_version": loop.agent_version,
        "to_version": target["id"],
        "pending_upgrade": loop.upgrade_to,
        "known_from": current is not None,
        "diff": versions.diff(old_def, target["definition"], tools),
        "orphaned_calls": versions.orphaned(target["definition"], pending),
    }


async def upgrade_loop(
    pool: Pool, loop_id: uuid.UUID, *, to_version: str | None, dry_run: bool, by: str
) -> dict[str, Any]:
    """Record (or, dry, only show) a loop's move to `to_version` (None: the newest)."""
    async with transaction(pool) as conn:
        loop = await (loops.get if dry_run else loops.get_for_update)(conn, loop_id=loop_id)
        if loop is None:
            raise LoopNotFound(f"no loop {loop_id}")
        target = await _target(conn, loop.agent, to_version)
        out = await plan(conn, loop, target)
        out["dry_run"] = dry_run
        out["applies"] = "at the loop's next turn boundary"
        if dry_run:
            return out
        if out["orphaned_calls"]:
            raise UpgradeWouldOrphan(
                f"loop {loop_id} has unresolved calls to {', '.join(out['orphaned_calls'])}, "
                f"which version {target['id']} would not offer under that name; decide or "
                "finish them first (a worker with the loop's version runs them)",
                orphaned_calls=out["orphaned_calls"],
                to_version=target["id"],
            )
        row = await agent_versions.set_upgrade(
            conn, loop_id=loop.id, to_version=target["id"], by=by
        )
        out["pending_upgrade"] = row.upgrade_to
        log = {"from": loop.agent_version, "to": target["id"], "by": by}
        await events.insert_many(
            conn,
            [
                NewEvent(
                    name=EventName.LOOP_UPGRADE_REQUESTED,
                    loop_id=loop.id,
                    reason=TransitionReason.UPGRADED,
                    log=json.dumps(log),
                )
            ],
        )
        return out


async def upgrade_agent(
    pool: Pool,
    agent: str,
    *,
    from_version: str | None,
    to_version: str | None,
    dry_run: bool,
    by: str,
) -> dict[str, Any]:
    """Upgrade (or, dry, show) a page of the agent's loops; the ones refused are named."""
    async with connection(pool) as conn:
        target = await _target(conn, agent, to_version)
        ids = await agent_versions.loops_to_upgrade(
            conn,
            agent=agent,
            from_version=from_version,
            to_version=target["id"],
            limit=BULK_PAGE + 1,
        )
    page, more = ids[:BULK_PAGE], len(ids) > BULK_PAGE
    upgraded: list[str] = []
    refused: list[dict[str, Any]] = []
    diffs: dict[str, Any] = {}
    for loop_id in page:
        try:
            res = await upgrade_loop(pool, loop_id, to_version=target["id"], dry_run=True, by=by)
            if res["orphaned_calls"]:
                refused.append({"loop_id": str(loop_id), "orphaned_calls": res["orphaned_calls"]})
                continue
            if not dry_run:
                res = await upgrade_loop(
                    pool, loop_id, to_version=target["id"], dry_run=False, by=by
                )
        except UpgradeWouldOrphan as exc:  # a call appeared between the two reads
            refused.append(
                {"loop_id": str(loop_id), "orphaned_calls": exc.details["orphaned_calls"]}
            )
            continue
        except LoopNotFound:
            continue
        upgraded.append(str(loop_id))
        key = str(res["from_version"])
        if key not in diffs:
            diffs[key] = res["diff"]
    return {
        "agent": agent,
        "to_version": target["id"],
        "dry_run": dry_run,
        "loops": upgraded,
        "refused": refused,
        "diffs": diffs,
        "remaining": more,
    }

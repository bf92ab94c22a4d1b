"""The admin loop page's Version tab: the loop's version, the agent's versions, a preview
of what an upgrade changes (the dry run) and the upgrade itself, behind CSRF."""

from __future__ import annotations

import uuid

from admin_kit import Browser

from agentd.db.pool import Pool, connection
from agentd.engine import versions
from agentd.registry import AgentRegistry
from agentd.store import loops
from agentd.testing.agents import CalcAgent


class CalcV2(CalcAgent):
    approval_required = ["add"]


async def test_preview_then_upgrade_a_loop_from_the_version_tab(
    operator: Browser, reader: Browser, pool: Pool, registry: AgentRegistry
) -> None:
    v2_reg = AgentRegistry()
    v2_reg.register("calc", CalcV2)
    await versions.record(pool, registry)
    await versions.record(pool, v2_reg)
    v1, v2 = registry.version_of("calc"), v2_reg.version_of("calc")
    started = await operator.post(
        "/admin/loops", {"agent": "calc", "message": "hi", "state": '{"llm": "http://127.0.0.1:9"}'}
    )
    assert started.status_code == 303
    loop_id = started.headers["location"].split("/")[-1].split("?")[0]
    page = (await operator.get(f"/admin/loops/{loop_id}?tab=version")).text
    assert v1 in page and v2 in page and 'data-form="upgrade"' in page
    assert "data-waiting-for-version" in page  # no worker runs anything here
    assert (
        'data-form="upgrade"' not in (await reader.get(f"/admin/loops/{loop_id}?tab=version")).text
    )

    preview = await operator.post(
        f"/admin/loops/{loop_id}/upgrade", {"to_version": v2, "mode": "preview"}
    )
    assert preview.status_code == 200 and "data-diff" in preview.text
    assert "Needs approval" in preview.text and ">add<" in preview.text
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=uuid.UUID(loop_id))
    assert row is not None and row.upgrade_to is None  # a preview writes nothing

    done = await operator.post(
        f"/admin/loops/{loop_id}/upgrade", {"to_version": v2, "mode": "upgrade"}
    )
    assert (await operator.flash(done)).startswith(f"ok: Upgrade to {v2} recorded")
    async with connection(pool) as conn:
        row = await loops.get(conn, loop_id=uuid.UUID(loop_id))
    assert row is not None and row.upgrade_to == v2 and row.upgrade_by == "admin"
    bad = await operator.post(f"/admin/loops/{loop_id}/upgrade", {"to_version": "nope"})
    assert (await operator.flash(bad)).startswith("error: no agent version 'nope'")
    forged = await operator.client.post(
        f"/admin/loops/{loop_id}/upgrade",
        data={"csrf": "forged", "to_version": v1, "mode": "upgrade"},
    )
    assert forged.status_code == 403

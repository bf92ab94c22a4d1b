"""A loop's tree of child loops (agents as tools): each child with its agent, status and
depth, nested under its parent, linked to its own loop page."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from agentd.admin import render
from agentd.api.state import AppState
from agentd.db.pool import Connection, connection
from agentd.store import loops

router = APIRouter(prefix="/admin")

#: Most loops shown in one tree (a runaway tree stays one page).
MAX_NODES = 500


async def _tree(conn: Connection, root: uuid.UUID) -> list[dict[str, Any]]:
    """The descendants of `root`, depth first, each with its level under the root."""
    out: list[dict[str, Any]] = []
    stack = [(root, 0)]
    while stack and len(out) < MAX_NODES:
        parent, level = stack.pop()
        kids = await loops.list_children(conn, parent_id=parent)
        for kid in reversed(kids):
            stack.append((kid.id, level + 1))
        out.extend({"loop": k, "level": level + 1} for k in kids)
    return out[:MAX_NODES]


@router.get("/loops/{loop_id}/children", include_in_schema=False)
async def children_page(request: Request, loop_id: str) -> Response:
    state: AppState = request.app.state.agentd
    try:
        lid = uuid.UUID(loop_id)
    except ValueError:
        return render.redirect(request, "/admin/loops", flash=("error", "No such loop."))
    async with connection(state.pool) as conn:
        loop = await loops.get(conn, loop_id=lid)
        if loop is None:
            return render.redirect(request, "/admin/loops", flash=("error", "No such loop."))
        nodes = await _tree(conn, lid)
    return render.render(request, "children.html", {"nav": "loops", "loop": loop, "nodes": nodes})

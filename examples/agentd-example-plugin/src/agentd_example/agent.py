"""A note-taking agent whose toolset also serves external MCP clients at /mcp/notes."""

from __future__ import annotations

import hmac
import os
from typing import Any

import agentd
from agentd.mcp.mounts import McpMount

notes = agentd.Toolset("notes", instructions="Keep short notes per subject.")
_NOTES: dict[str, list[str]] = {}  # a real plugin would use its own database


@notes.tool(description="Save a note about the current subject")
async def save_note(text: str, ctx: agentd.CallContext) -> str:
    who = str(ctx.principal or "anonymous")
    _NOTES.setdefault(who, []).append(text)
    return f"saved note {len(_NOTES[who])} for {who}"


@notes.tool(description="List the notes about the current subject")
async def list_notes(ctx: agentd.CallContext) -> dict[str, Any]:
    return {"notes": _NOTES.get(str(ctx.principal or "anonymous"), [])}


class NotesAgent(agentd.Agent):
    system_prompt = "You keep notes for the user. Save what they ask you to remember."
    base_url = os.environ.get("NOTES_LLM_BASE_URL", "https://api.openai.com")
    model = os.environ.get("NOTES_LLM_MODEL", "gpt-4o-mini")
    api_key_env = "OPENAI_API_KEY"
    mcps = [{"name": "notes", "toolset": notes}]


def authorize(token: str | None, request: Any) -> str | None:
    """External MCP clients present NOTES_MCP_TOKEN; no token, no access (fail-closed)."""
    expected = os.environ.get("NOTES_MCP_TOKEN")
    if not expected or token is None or not hmac.compare_digest(token, expected):
        return None
    return "mcp-client"


mount = McpMount(toolset=notes, authorizer=authorize)

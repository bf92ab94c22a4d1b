"""A server's `tools/list` answer as the tools an agent is offered: names checked, unusable
schemas dropped, the whitelist applied, the prefix added, required tools insisted on."""

from __future__ import annotations

from typing import Any

from mcp.shared import inbound

from agentd import logs
from agentd.errors import McpError
from agentd.mcp import outcomes, schemas, tool_names
from agentd.mcp.config import McpServerConfig
from agentd.mcp.records import McpTool
from agentd.mcp.toolset import REQUIRES_APPROVAL_META_KEY

log = logs.get("agentd.mcp.client")

PREFIX_SEPARATOR = "__"


def advertised_name(config: McpServerConfig, remote_name: str) -> str:
    return f"{config.prefix}{PREFIX_SEPARATOR}{remote_name}" if config.prefix else remote_name


def tools_of(config: McpServerConfig, remote: list[dict[str, Any]]) -> list[McpTool]:
    """The tools of `remote` (listed specs, each with a "name") the agent is offered."""
    refused: dict[str, str] = {}
    remote = [t for t in remote if _valid_name(config, t, refused) and _usable(config, t, refused)]
    names = {t["name"] for t in remote}
    missing = [n for n in config.required_tools if n not in names]
    if missing:
        why = "".join(f" ({n!r} refused: {refused[n]})" for n in missing if n in refused)
        raise McpError(
            f"MCP server {config.name!r} does not offer required tool(s): "
            f"{', '.join(missing)}{why}",
            retryable=False,  # it answered; waiting will not add the tools
        )
    allowed = set(config.tools) if config.tools is not None else None
    return [_tool(config, t) for t in remote if allowed is None or t["name"] in allowed]


def _valid_name(config: McpServerConfig, spec: dict[str, Any], refused: dict[str, str]) -> bool:
    """A tool whose name (as served, and as advertised with the prefix) breaks the MCP
    spec's tool-name rules is dropped (mcp/tool_names.py)."""
    name = spec["name"]
    reason = tool_names.refusal(name)
    if reason is None:
        reason = tool_names.refusal(advertised_name(config, name))
        reason = f"with its prefix, {reason}" if reason else None
    if reason is None:
        return True
    if isinstance(name, str):
        refused[name] = reason
    log.warning(
        "mcp_client.tool_dropped", server=config.name, tool=tool_names.shown(name), reason=reason
    )
    return False


def _usable(config: McpServerConfig, spec: dict[str, Any], refused: dict[str, str]) -> bool:
    """A tool whose input schema cannot be used (mcp/schemas.py: not an object schema,
    too deep, too large, invalid) is dropped, and so (2026-07-28) is one whose
    `x-mcp-header` annotations are invalid: a warning names it and says why."""
    schema = spec.get("inputSchema")
    reason = schemas.unusable(schema) or inbound.find_invalid_x_mcp_header(schema)
    if reason is not None:
        name = str(spec["name"])
        refused[name] = reason
        log.warning("mcp_client.tool_dropped", server=config.name, tool=name, reason=reason)
    return reason is None


def _tool(config: McpServerConfig, spec: dict[str, Any]) -> McpTool:
    meta = spec.get("_meta") or {}
    return McpTool(
        name=advertised_name(config, spec["name"]),
        remote_name=spec["name"],
        server=config.name,
        description=spec.get("description") or "",
        input_schema=spec.get("inputSchema") or {"type": "object", "properties": {}},
        requires_approval=bool(meta.get(REQUIRES_APPROVAL_META_KEY))
        if isinstance(meta, dict)
        else False,
        task_support=outcomes.task_support(spec),
    )

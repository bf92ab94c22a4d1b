"""`transport_for`: build the transport an `mcps` entry describes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.mcp.config import McpServerConfig
from agentd.mcp.http import HttpTransport
from agentd.mcp.port import Transport
from agentd.mcp.stdio import StdioTransport

if TYPE_CHECKING:
    import httpx

    from agentd.mcp.hub import McpHub


def transport_for(
    config: McpServerConfig,
    *,
    http: httpx.AsyncClient | None = None,
    hub: McpHub | None = None,
) -> Transport:
    """The transport an entry names; `http` is a shared httpx.AsyncClient to reuse, `hub`
    the process's knowledge of its servers (mcp/hub.py)."""
    if config.url is not None:
        return HttpTransport(
            config.url,
            api_token=config.api_token,
            headers=config.headers,
            timeout=config.timeout,
            client=http,
            hub=hub,
        )
    if config.command is not None:
        return StdioTransport(
            config.command, env=config.env, cwd=config.cwd, timeout=config.timeout
        )
    if config.toolset is not None:
        return config.toolset  # a Toolset is its own transport
    assert config.transport is not None  # exactly one of the four (McpServerConfig)
    return config.transport

"""MCP server mounts: toolsets served to external MCP clients at `/mcp/<name>`.

Mounts come from the entry-point group `agentd.mcp_servers` (entry name = path segment;
the value is an `McpMount`) and from `[mcp_servers.NAME]` tables of the config file.
A mount cannot be built without an authorizer: there is no anonymous mode unless the
authorizer itself says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentd.errors import ConfigError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from agentd.api.state import AppState

#: `(token, request) -> principal | None` (sync or async); None answers 401.
Authorizer = Callable[[str | None, Any], Any | Awaitable[Any]]

ENTRY_POINT_GROUP = "agentd.mcp_servers"


@dataclass(frozen=True)
class McpMount:
    toolset: Any  # an agentd.Toolset (anything with `handle`/`deliver`)
    authorizer: Authorizer

    def __post_init__(self) -> None:
        if self.authorizer is None or not callable(self.authorizer):
            raise ConfigError("an MCP mount needs an authorizer (fail-closed)")


def mount_all(app: FastAPI, state: AppState) -> dict[str, McpMount]:
    """Mount every configured MCP server on `app`; returns them by name."""
    return {}

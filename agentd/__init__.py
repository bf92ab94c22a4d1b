"""agentd: durable AI agent loops on PostgreSQL.

The plugin author's API: agents (`Agent`, `LoopView`), tools (`Toolset`, `tool`, `prompt`,
`CallContext`), middleware (`Builder`, `TurnContext`, `ToolContext`) and the errors.
Importing it loads no database driver, web framework or HTTP client.
"""

from __future__ import annotations

from agentd.__about__ import __version__
from agentd.agent import Agent, LoopView
from agentd.builder import Builder
from agentd.engine.context import ToolContext, TurnContext
from agentd.errors import (
    AgentdError,
    AlreadyDecided,
    ConfigError,
    Conflict,
    FenceLost,
    InvalidTransition,
    LimitExceeded,
    LLMError,
    LoopNotFound,
    McpError,
    NotFound,
    ToolError,
    UnknownAgent,
    UnknownMiddleware,
)
from agentd.llm.types import Provider
from agentd.mcp.port import CallContext
from agentd.mcp.toolset import Toolset, prompt, tool

__all__ = [
    "Agent",
    "AgentdError",
    "AlreadyDecided",
    "Builder",
    "CallContext",
    "ConfigError",
    "Conflict",
    "FenceLost",
    "InvalidTransition",
    "LLMError",
    "LimitExceeded",
    "LoopNotFound",
    "LoopView",
    "McpError",
    "NotFound",
    "Provider",
    "ToolContext",
    "ToolError",
    "Toolset",
    "TurnContext",
    "UnknownAgent",
    "UnknownMiddleware",
    "__version__",
    "prompt",
    "tool",
]

"""agentd: durable AI agent loops on PostgreSQL."""

from __future__ import annotations

from agentd.__about__ import __version__
from agentd.agent import Agent, LoopView
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
    "ToolError",
    "Toolset",
    "UnknownAgent",
    "UnknownMiddleware",
    "__version__",
    "prompt",
    "tool",
]

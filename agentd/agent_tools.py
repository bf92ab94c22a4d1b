"""Agents as tools: an agent's `agent_tools`, parsed, and the MCP server that lists them.

Each entry names another registered agent; the model sees it as a tool (`agent__<name>`
unless named) taking a `message` and an optional `state`. Calling one starts a child loop
(engine/children.py); the tools are listed by an in-process toolset whose handlers never
run (ToolExecution hands these calls to engine.children instead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentd.errors import ConfigError

if TYPE_CHECKING:
    from agentd.mcp.config import McpServerConfig

#: The MCP server name an agent's agent tools are listed under (one per agent).
SERVER = "agentd.agents"

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "The task, as a message to the agent."},
        "state": {
            "type": "object",
            "description": "Optional state for the agent's loop (merged over the caller's).",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}


class AgentTool(BaseModel):
    """One `agent_tools` entry: a string (the agent's name) or a table of these keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str = Field(min_length=1)
    name: str | None = Field(None, min_length=1, max_length=128)
    description: str | None = None
    #: fire and forget: the call answers "started child loop <id>" at once.
    detach: bool = False

    @property
    def tool_name(self) -> str:
        return self.name or f"agent__{self.agent}"

    @property
    def tool_description(self) -> str:
        if self.description:
            return self.description
        if self.detach:
            return f"Start the {self.agent} agent on a task in the background."
        return f"Delegate a task to the {self.agent} agent; it answers with its final answer."


def parse(owner: str, entries: object) -> tuple[AgentTool, ...]:
    """An agent's `agent_tools`, checked: ConfigError naming the agent and the problem."""
    if not entries:
        return ()
    if not isinstance(entries, list | tuple):
        raise ConfigError(f"agent {owner!r}: agent_tools must be a list")
    out: list[AgentTool] = []
    for entry in entries:
        raw = {"agent": entry} if isinstance(entry, str) else entry
        try:
            out.append(AgentTool.model_validate(raw))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"agent {owner!r}: agent_tools entry {entry!r}: {problems}") from None
    names = [t.tool_name for t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"agent {owner!r}: agent_tools name {dup} twice")
    return tuple(out)


def by_name(tools: tuple[AgentTool, ...], name: str) -> AgentTool | None:
    return next((t for t in tools if t.tool_name == name), None)


def server(owner: str, tools: tuple[AgentTool, ...]) -> McpServerConfig:
    """The in-process MCP server listing `tools` (built once per agent class)."""
    from agentd.mcp.config import McpServerConfig
    from agentd.mcp.toolset import Toolset

    toolset = Toolset(SERVER)
    for t in tools:

        async def not_here(message: str, state: dict[str, Any] | None = None) -> str:
            # Only reached when something other than ToolExecution calls the toolset.
            raise RuntimeError("an agent tool runs as a child loop, not through MCP")

        toolset.tool(
            not_here, name=t.tool_name, description=t.tool_description, input_schema=INPUT_SCHEMA
        )
    return McpServerConfig(name=SERVER, toolset=toolset)

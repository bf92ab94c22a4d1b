"""What the worker runs: each agent class's LLM-turn and tool-call stacks.

The engine names only this port; pipeline/stacks.py builds the stacks (the default
middlewares, global configuration, each agent's configure hooks) and whoever assembles a
process hands them to the Engine, so the engine never imports the pipeline.
Called by: engine.worker (runs them), engine.service (hands them to the worker).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agentd.engine.context import ToolContext, TurnContext


class StackSource(Protocol):
    def llm(self, agent_cls: type | None) -> Callable[[TurnContext], Awaitable[None]]:
        """The LLM-turn stack of `agent_cls` (None: an unregistered agent's defaults)."""
        ...

    def tool(self, agent_cls: type | None) -> Callable[[ToolContext], Awaitable[None]]:
        """The tool-call stack of `agent_cls`."""
        ...

"""Default stacks, global configuration, and the per-agent stack cache.

Global configuration runs once, on a fresh copy of the defaults, so re-applying it never
accumulates duplicates; each agent's `configure_*_middlewares` edits its own copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentd.engine.context import ToolContext, TurnContext
from agentd.pipeline.builder import Builder, Handler
from agentd.pipeline.llm import agent_initialization as llm_init
from agentd.pipeline.llm import error_handling as llm_errors
from agentd.pipeline.llm import event_logging as llm_events
from agentd.pipeline.llm.compaction import Compaction
from agentd.pipeline.llm.network_calling import NetworkCalling
from agentd.pipeline.llm.response_parsing import ResponseParsing
from agentd.pipeline.llm.tool_discovery import ToolDiscovery
from agentd.pipeline.tool import agent_initialization as tool_init
from agentd.pipeline.tool import error_handling as tool_errors
from agentd.pipeline.tool import event_logging as tool_events
from agentd.pipeline.tool.approval_gate import ApprovalGate
from agentd.pipeline.tool.response_creation import ResponseCreation
from agentd.pipeline.tool.tool_execution import ToolExecution


def default_llm_builder() -> Builder[TurnContext]:
    return (
        Builder[TurnContext]()
        .use(llm_errors.ErrorHandling)
        .use(llm_init.AgentInitialization)
        .use(llm_events.EventLogging)
        .use(ToolDiscovery)
        .use(Compaction)
        .use(NetworkCalling)
        .use(ResponseParsing)
    )


def default_tool_builder() -> Builder[ToolContext]:
    return (
        Builder[ToolContext]()
        .use(tool_errors.ErrorHandling)
        .use(tool_init.AgentInitialization)
        .use(tool_events.EventLogging)
        .use(ApprovalGate)
        .use(ToolExecution)
        .use(ResponseCreation)
    )


Configure = Callable[[Builder[Any]], None]


class Stacks:
    """Builds each agent's stacks once, then serves them frozen."""

    def __init__(
        self, *, configure_llm: Configure | None = None, configure_tool: Configure | None = None
    ) -> None:
        self._llm = default_llm_builder()
        self._tool = default_tool_builder()
        if configure_llm:
            configure_llm(self._llm)
        if configure_tool:
            configure_tool(self._tool)
        self._llm_cache: dict[Any, Handler[TurnContext]] = {}
        self._tool_cache: dict[Any, Handler[ToolContext]] = {}

    def llm_builder_for(self, agent_cls: type | None) -> Builder[TurnContext]:
        b = self._llm.copy()
        if agent_cls is not None:
            agent_cls.configure_llm_middlewares(b)  # type: ignore[attr-defined]
        return b

    def tool_builder_for(self, agent_cls: type | None) -> Builder[ToolContext]:
        b = self._tool.copy()
        if agent_cls is not None:
            agent_cls.configure_tool_middlewares(b)  # type: ignore[attr-defined]
        return b

    def llm(self, agent_cls: type | None) -> Handler[TurnContext]:
        if agent_cls not in self._llm_cache:
            self._llm_cache[agent_cls] = self.llm_builder_for(agent_cls).build()
        return self._llm_cache[agent_cls]

    def tool(self, agent_cls: type | None) -> Handler[ToolContext]:
        if agent_cls not in self._tool_cache:
            self._tool_cache[agent_cls] = self.tool_builder_for(agent_cls).build()
        return self._tool_cache[agent_cls]

"""Default stacks, global configuration, and the per-agent stack cache.

Global configuration runs once, on a fresh copy of the defaults, so re-applying it never
accumulates duplicates; each agent's `configure_*_middlewares` edits its own copy.
What a middleware needs to know about the stack it runs in is decided here, once, when
the stack is built (`StackFacts`), and handed to it as a constructor argument: no
middleware inspects its neighbours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentd.engine.context import ToolContext, TurnContext
from agentd.pipeline.builder import Builder, Handler, Spec
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


@dataclass(frozen=True)
class StackFacts:
    """What the stock middlewares need to know about one stack, read from its classes.

    Each goes to the stock class only (a subclass that replaces it gets the default, the
    safe path), overriding whatever the spec said: a wrong `True` would lose a write.
    """

    #: ToolExecution: the stock ResponseCreation runs right after it, so nothing in
    #: between may observe (or crash after) a checkpoint; the result is recorded in the
    #: response's statement (`ToolExecution(response_next=...)`).
    response_next: bool = False
    #: ToolDiscovery: ResponseParsing (or a subclass) finalizes after it and records a
    #: discovery left in ctx.unrecorded with the turn (`ToolDiscovery(defers_record=...)`).
    defers_record: bool = False

    @classmethod
    def of(cls, classes: Sequence[type]) -> StackFacts:
        after_execution = _after(classes, ToolExecution)
        return cls(
            response_next=after_execution[:1] == [ResponseCreation],
            defers_record=any(
                issubclass(c, ResponseParsing) for c in _after(classes, ToolDiscovery)
            ),
        )

    def apply(self, specs: Sequence[Spec]) -> list[Spec]:
        given: dict[type, dict[str, bool]] = {
            ToolExecution: {"response_next": self.response_next},
            ToolDiscovery: {"defers_record": self.defers_record},
        }
        return [Spec(s.cls, {**s.kwargs, **given[s.cls]}) if s.cls in given else s for s in specs]


def _after(classes: Sequence[type], cls: type) -> list[type]:
    """The classes below `cls` in the stack; empty when it is absent."""
    return list(classes[classes.index(cls) + 1 :]) if cls in classes else []


def build(builder: Builder[Any]) -> Handler[Any]:
    """The stack `builder` describes, its middlewares told what they need to know of it."""
    return Builder(StackFacts.of(builder.classes).apply(builder.specs)).build()


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
            self._llm_cache[agent_cls] = build(self.llm_builder_for(agent_cls))
        return self._llm_cache[agent_cls]

    def tool(self, agent_cls: type | None) -> Handler[ToolContext]:
        if agent_cls not in self._tool_cache:
            self._tool_cache[agent_cls] = build(self.tool_builder_for(agent_cls))
        return self._tool_cache[agent_cls]

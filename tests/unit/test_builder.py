from __future__ import annotations

import pytest

from agentd import Agent
from agentd.errors import UnknownMiddleware
from agentd.pipeline.builder import Builder
from agentd.pipeline.llm.agent_initialization import AgentInitialization
from agentd.pipeline.llm.compaction import Compaction
from agentd.pipeline.llm.error_handling import ErrorHandling
from agentd.pipeline.llm.event_logging import EventLogging
from agentd.pipeline.llm.network_calling import NetworkCalling
from agentd.pipeline.llm.response_parsing import ResponseParsing
from agentd.pipeline.llm.tool_call_xml_parser import ToolCallXmlParser
from agentd.pipeline.llm.tool_discovery import ToolDiscovery
from agentd.pipeline.stacks import (
    StackFacts,
    Stacks,
    build,
    default_llm_builder,
    default_tool_builder,
)
from agentd.pipeline.tool import agent_initialization as tinit
from agentd.pipeline.tool import error_handling as terr
from agentd.pipeline.tool import event_logging as tlog
from agentd.pipeline.tool.approval_gate import ApprovalGate
from agentd.pipeline.tool.response_creation import ResponseCreation
from agentd.pipeline.tool.tool_execution import ToolExecution


class Recorder:
    def __init__(self, app, *, tag: str = "") -> None:  # type: ignore[no-untyped-def]
        self.app = app
        self.tag = tag

    async def __call__(self, ctx: list[str]) -> None:
        ctx.append(self.tag or type(self).__name__)
        await self.app(ctx)


class A(Recorder):
    pass


class B(Recorder):
    pass


class C(Recorder):
    pass


def test_default_stacks_have_the_reference_order() -> None:
    assert default_llm_builder().classes == [
        ErrorHandling,
        AgentInitialization,
        EventLogging,
        ToolDiscovery,
        Compaction,
        NetworkCalling,
        ResponseParsing,
    ]
    assert default_tool_builder().classes == [
        terr.ErrorHandling,
        tinit.AgentInitialization,
        tlog.EventLogging,
        ApprovalGate,
        ToolExecution,
        ResponseCreation,
    ]


async def test_edits_compose_in_order() -> None:
    b: Builder[list[str]] = Builder().use(A).use(C)
    b.insert_before(C, B).insert_after(C, Recorder, tag="last").replace(A, Recorder, tag="first")
    out: list[str] = []
    await b.build()(out)
    assert out == ["first", "B", "C", "last"]
    b.delete(B).delete(B)  # lenient
    out.clear()
    await b.build()(out)
    assert out == ["first", "C", "last"]


@pytest.mark.parametrize("edit", ["insert_before", "insert_after", "replace"])
def test_positional_edit_of_absent_middleware_raises_unknown_middleware(edit: str) -> None:
    b: Builder[list[str]] = Builder().use(A)
    with pytest.raises(UnknownMiddleware, match="B is not in the stack"):
        getattr(b, edit)(B, C)


def test_per_agent_edits_do_not_leak_and_global_config_applies_once() -> None:
    class XmlAgent(Agent):
        @classmethod
        def configure_llm_middlewares(cls, builder):  # type: ignore[no-untyped-def]
            builder.insert_before(ResponseParsing, ToolCallXmlParser)

    calls = []

    def configure(builder: Builder) -> None:  # type: ignore[type-arg]
        calls.append(1)
        builder.insert_after(EventLogging, A)

    stacks = Stacks(configure_llm=configure)
    with_xml = stacks.llm_builder_for(XmlAgent).classes
    plain = stacks.llm_builder_for(Agent).classes
    again = stacks.llm_builder_for(XmlAgent).classes
    assert ToolCallXmlParser in with_xml and ToolCallXmlParser not in plain
    assert with_xml == again and with_xml.count(A) == 1 and calls == [1]
    assert stacks.llm(XmlAgent) is stacks.llm(XmlAgent)


def _find(app: object, cls: type) -> object:
    while type(app) is not cls:
        app = app.app  # type: ignore[attr-defined]
    return app


def test_stock_stacks_tell_execution_and_discovery_what_follows_them() -> None:
    tool = build(default_tool_builder())
    llm = build(default_llm_builder())
    assert _find(tool, ToolExecution).response_next  # type: ignore[attr-defined]
    assert _find(llm, ToolDiscovery).defers_record  # type: ignore[attr-defined]


def test_a_middleware_between_execution_and_response_gets_its_own_checkpoint() -> None:
    between = default_tool_builder().insert_after(ToolExecution, A)
    assert not _find(build(between), ToolExecution).response_next  # type: ignore[attr-defined]
    # A subclass of ResponseCreation may not record a folded checkpoint: only the stock one.
    sub = default_tool_builder().replace(ResponseCreation, type("R", (ResponseCreation,), {}))
    assert StackFacts.of(sub.classes) == StackFacts(response_next=False, defers_record=False)


def test_discovery_defers_its_record_only_to_a_response_parsing_below_it() -> None:
    xml = default_llm_builder().insert_before(ResponseParsing, ToolCallXmlParser)
    assert StackFacts.of(xml.classes).defers_record  # whatever runs in between
    moved = default_llm_builder().delete(ResponseParsing).insert_before(ToolDiscovery, A)
    assert not _find(build(moved), ToolDiscovery).defers_record  # type: ignore[attr-defined]


def test_the_stack_decides_over_a_flag_given_in_the_spec() -> None:
    b = default_tool_builder().replace(ToolExecution, ToolExecution, response_next=True)
    b.insert_after(ToolExecution, A)
    assert not _find(build(b), ToolExecution).response_next  # type: ignore[attr-defined]

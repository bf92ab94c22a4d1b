"""ToolCallXmlParser (opt-in): reads tool calls that a model wrote as XML in its text.

Position: before ResponseParsing (insert it with
`builder.insert_before(ResponseParsing, ToolCallXmlParser)`). Reads/writes ctx.response.
Finalizer: no.
"""

from __future__ import annotations

from agentd.engine.context import TurnContext
from agentd.llm import xml_tool_calls
from agentd.pipeline.builder import Handler


class ToolCallXmlParser:
    def __init__(self, app: Handler[TurnContext]) -> None:
        self.app = app

    async def __call__(self, ctx: TurnContext) -> None:
        resp = ctx.response
        if resp is not None and not resp.tool_calls and resp.content:
            content, calls = xml_tool_calls.parse(resp.content)
            if calls:
                resp.content = content
                resp.tool_calls = calls
        await self.app(ctx)

"""A client for `@modelcontextprotocol/conformance client`: the harness passes the URL last.

It does what the engine does with a server, through the same `McpClient`: initialize
(probe, or handshake), list tools, call each one (the scenario's `toolCalls` from
MCP_CONFORMANCE_CONTEXT when it names them), answer an InputRequiredResult the way a
person's answer over REST would (accept, with the schema's defaults), end the session.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from agentd.mcp.client import McpClient
from agentd.mcp.config import McpServerConfig

_SAMPLES: dict[str, Any] = {
    "number": 1,
    "integer": 1,
    "string": "x",
    "boolean": True,
    "array": [],
    "object": {},
}


def sample(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments that satisfy the required properties of a simple object schema."""
    properties = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name in schema.get("required") or []:
        spec = properties.get(name) or {}
        if "default" in spec:
            out[name] = spec["default"]
        elif spec.get("enum"):
            out[name] = spec["enum"][0]
        else:
            out[name] = _SAMPLES.get(str(spec.get("type")), "x")
    return out


def accept(request: dict[str, Any]) -> dict[str, Any]:
    """Accept an elicitation, filling every field from its default (or a sample)."""
    schema = (request.get("params") or {}).get("requestedSchema") or {}
    content: dict[str, Any] = {}
    for name, spec in (schema.get("properties") or {}).items():
        content[name] = spec.get("default", _SAMPLES.get(str(spec.get("type")), "x"))
    return {"action": "accept", "content": content}


async def main(url: str) -> None:
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    client = McpClient(McpServerConfig(name="conformance", url=url, timeout=10))
    info = await client.initialize()
    tools, _ = await client.list_tools(info.session_id)
    calls = context.get("toolCalls") or [
        {"name": t.remote_name, "arguments": sample(t.input_schema)} for t in tools
    ]
    schemas = {t.remote_name: t.input_schema for t in tools}
    if os.environ.get("MCP_CONFORMANCE_SCENARIO") == "json-schema-2020-12-preservation":
        # The scenario reads back, through its echo tool, the schema agentd kept for the
        # other tool: what the model is shown must be the server's schema, verbatim.
        focal = next(t for t in tools if "schema" not in t.input_schema.get("properties", {}))
        for call in calls:
            if "schema" in (call["arguments"] or {}):
                call["arguments"] = {"schema": focal.input_schema}
    for call in calls:
        name, arguments = call["name"], call.get("arguments") or {}
        outcome = await client.call_tool(
            name, arguments, session_id=info.session_id, input_schema=schemas.get(name)
        )
        for _ in range(3):
            if outcome.input_required is None:
                break
            asked = outcome.input_required.get("inputRequests") or {}
            outcome = await client.call_tool(
                name,
                arguments,
                session_id=info.session_id,
                input_responses={key: accept(req) for key, req in asked.items()},
                request_state=outcome.input_required.get("requestState"),
            )
        print(f"{name}: error={outcome.is_error} {outcome.text[:200]}", file=sys.stderr)
    await client.terminate(info.session_id)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[-1]))

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentd.mcp import jsonrpc
from agentd.mcp.port import CallContext, idempotency_key
from agentd.mcp.toolset import Toolset


def billing() -> Toolset:
    tools = Toolset("billing")

    @tools.tool(description="Look up a customer")
    async def lookup(customer_id: str, ctx: CallContext, verbose: bool = False) -> dict[str, Any]:
        return {"id": customer_id, "key": ctx.idempotency_key, "verbose": verbose}

    @tools.tool(
        name="refund",
        input_schema={
            "type": "object",
            "properties": {"amount": {"type": "integer"}},
            "required": ["amount"],
        },
        requires_approval=True,
    )
    def refund(args: dict[str, Any], ctx: CallContext) -> str:
        return f"refunded {args['amount']} on {threading.current_thread().name}"

    @tools.tool
    def explode() -> str:
        raise ValueError("card declined")

    @tools.prompt(description="Greet", arguments=[{"name": "who", "required": True}])
    def greet(args: dict[str, str], ctx: CallContext) -> str:
        if args["who"] == "error":
            raise RuntimeError("no greeting")
        return f"Hello {args['who']}"

    return tools


async def call(tools: Toolset, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    delivery = await tools.deliver(jsonrpc.request(method, params or {}))
    assert delivery.body is not None
    return delivery.body


async def test_schema_is_derived_from_annotations_without_the_ctx_parameter() -> None:
    tools = (await call(billing(), "tools/list"))["result"]["tools"]
    lookup = next(t for t in tools if t["name"] == "lookup")
    assert lookup["description"] == "Look up a customer"
    assert set(lookup["inputSchema"]["properties"]) == {"customer_id", "verbose"}
    assert lookup["inputSchema"]["required"] == ["customer_id"]


async def test_requires_approval_is_advertised_in_meta() -> None:
    tools = (await call(billing(), "tools/list"))["result"]["tools"]
    assert next(t for t in tools if t["name"] == "refund")["_meta"] == {
        "agentd/requiresApproval": True
    }
    assert "_meta" not in next(t for t in tools if t["name"] == "lookup")


async def test_dict_result_is_json_text_and_structured_content_with_the_idempotency_key() -> None:
    params = {
        "name": "lookup",
        "arguments": {"customer_id": "c1"},
        "_meta": {"agentd/idempotencyKey": idempotency_key(9)},
    }
    result = (await call(billing(), "tools/call", params))["result"]
    assert result["structuredContent"] == {
        "id": "c1",
        "key": "agentd:tool_call:9",
        "verbose": False,
    }
    assert result["content"][0]["type"] == "text" and '"c1"' in result["content"][0]["text"]


async def test_sync_handler_runs_off_the_event_loop_with_raw_args() -> None:
    result = (await call(billing(), "tools/call", {"name": "refund", "arguments": {"amount": 5}}))[
        "result"
    ]
    text = result["content"][0]["text"]
    assert text.startswith("refunded 5 on ") and "MainThread" not in text


async def test_invalid_arguments_are_an_is_error_result_naming_the_field() -> None:
    result = (await call(billing(), "tools/call", {"name": "lookup", "arguments": {}}))["result"]
    assert result["isError"] is True and "customer_id" in result["content"][0]["text"]
    result = (
        await call(billing(), "tools/call", {"name": "refund", "arguments": {"amount": "x"}})
    )["result"]
    assert result["isError"] is True and "amount" in result["content"][0]["text"]


async def test_handler_exception_is_an_is_error_result_with_its_message() -> None:
    result = (await call(billing(), "tools/call", {"name": "explode", "arguments": {}}))["result"]
    assert result == {"content": [{"type": "text", "text": "card declined"}], "isError": True}


async def test_unknown_tool_and_unknown_method_are_protocol_errors() -> None:
    assert (await call(billing(), "tools/call", {"name": "nope"}))["error"][
        "code"
    ] == jsonrpc.INVALID_PARAMS
    assert (await call(billing(), "resources/list"))["error"]["code"] == jsonrpc.METHOD_NOT_FOUND


async def test_prompts_are_listed_and_rendered_as_a_user_message() -> None:
    tools = billing()
    assert (await call(tools, "initialize"))["result"]["capabilities"]["prompts"] == {
        "listChanged": False
    }
    assert (await call(tools, "prompts/list"))["result"]["prompts"][0]["name"] == "greet"
    got = (await call(tools, "prompts/get", {"name": "greet", "arguments": {"who": "Ada"}}))[
        "result"
    ]
    assert got["messages"] == [{"role": "user", "content": {"type": "text", "text": "Hello Ada"}}]


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"name": "greet", "arguments": {}}, jsonrpc.INVALID_PARAMS),
        ({"name": "nope"}, jsonrpc.INVALID_PARAMS),
        ({"name": "greet", "arguments": {"who": "error"}}, jsonrpc.INTERNAL_ERROR),
    ],
)
async def test_prompt_failures_are_protocol_errors(params: dict[str, Any], code: int) -> None:
    assert (await call(billing(), "prompts/get", params))["error"]["code"] == code


async def test_prompts_capability_is_absent_without_prompts() -> None:
    assert "prompts" not in (await call(Toolset("empty"), "initialize"))["result"]["capabilities"]


async def test_on_initialize_mints_the_session_id_and_notifications_get_no_body() -> None:
    tools = Toolset("stateful")

    @tools.on_initialize
    def mint(params: dict[str, Any], ctx: CallContext) -> str:
        return f"sess-{params['clientInfo']['name']}"

    init = await tools.deliver(jsonrpc.request("initialize", {"clientInfo": {"name": "agentd"}}))
    assert init.session_id == "sess-agentd"
    note = await tools.deliver(
        jsonrpc.notification("notifications/initialized"), session_id="sess-agentd"
    )
    assert (note.body, note.status, note.session_id) == (None, 202, "sess-agentd")
    ping = await tools.deliver(jsonrpc.request("ping"), session_id="sess-agentd")
    assert (
        ping.body == {"jsonrpc": "2.0", "id": ping.body["id"], "result": {}} if ping.body else False
    )

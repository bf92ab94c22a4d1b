"""What a `tools/call` answer means: a `ToolOutcome` from the JSON-RPC body, and which
errors are agentd's own bug rather than the tool's answer."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from agentd.errors import McpError
from agentd.mcp import eras, jsonrpc
from agentd.mcp.records import Exchange, ToolOutcome

ELICITATION_UNSUPPORTED = (
    "this server asked for user input mid-call; agentd supports that only with MCP "
    "2026-07-28 servers"
)
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TERMINAL = ("completed", "failed", "cancelled")
#: JSON-RPC errors that mean "agentd built a malformed request": a client bug, not the
#: tool's answer. (-32602 counts only when the model's arguments fit the tool's schema.)
CLIENT_BUG_CODES = frozenset(
    {
        jsonrpc.PARSE_ERROR,
        jsonrpc.INVALID_REQUEST,
        eras.HEADER_MISMATCH,
        eras.UNSUPPORTED_PROTOCOL_VERSION,
    }
)
CLIENT_BUG_TEXT = (
    "agentd sent a request the MCP server rejected as malformed ({error}); this is a bug "
    "in agentd's MCP client, not the tool's answer"
)


def is_client_bug(
    code: int | None, arguments: dict[str, Any] | None, schema: dict[str, Any] | None
) -> bool:
    if code in CLIENT_BUG_CODES:
        return True
    if code != jsonrpc.INVALID_PARAMS or not isinstance(schema, dict):
        return False
    try:
        return bool(jsonschema.Draft202012Validator(schema).is_valid(arguments or {}))
    except jsonschema.SchemaError:
        return False  # the server's schema is broken; the error may well be about it


def task_support(spec: dict[str, Any]) -> str | None:
    execution = spec.get("execution")
    support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return support if support in ("optional", "required") else None


def runs_tasks(capabilities: dict[str, Any]) -> bool:
    """Does a server take task-augmented tools/call? (2025-11-25 `tasks` capability, or the
    2026-07-28 tasks extension.)"""
    tasks = capabilities.get("tasks")
    if isinstance(tasks, dict):
        requests = tasks.get("requests") or {}
        tools = requests.get("tools") if isinstance(requests, dict) else None
        if isinstance(tools, dict) and "call" in tools:
            return True
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def outcome(
    body: dict[str, Any] | None,
    session_id: str,
    exchanges: list[Exchange],
    *,
    refused: list[str] | None = None,
) -> ToolOutcome:
    asked = [m for m in refused or [] if m in ("elicitation/create", "sampling/createMessage")]
    if (err := jsonrpc.error_of(body)) is not None:
        code = err.get("code")
        text = jsonrpc.describe_error(err)
        if asked:
            text = f"{ELICITATION_UNSUPPORTED} (it sent {', '.join(asked)}). {text}"
        return ToolOutcome(
            text=text, structured=None, is_error=True, session_id=session_id,
            exchanges=exchanges, error_code=code if isinstance(code, int) else None,
        )  # fmt: skip
    result = body.get("result") if body else None
    if not isinstance(result, dict):
        raise McpError("MCP server answered tools/call without a result object")
    if asked:
        # The server's own message (often "Error executing tool") follows ours.
        said = "\n".join(
            content_text(c) for c in result.get("content") or [] if isinstance(c, dict)
        )
        return ToolOutcome(
            text=f"{ELICITATION_UNSUPPORTED} (it sent {', '.join(asked)})."
            + (f" The server said: {said}" if said else ""),
            structured=None, is_error=True, session_id=session_id, exchanges=exchanges,
        )  # fmt: skip
    if result.get("resultType") == "input_required":
        return ToolOutcome(
            text="", structured=None, is_error=False, session_id=session_id, exchanges=exchanges,
            input_required={
                "inputRequests": result.get("inputRequests") or {},
                "requestState": result.get("requestState"),
            },
        )  # fmt: skip
    task = result.get("task")
    if isinstance(task, dict) and isinstance(task.get("taskId"), str) and "content" not in result:
        return ToolOutcome(
            text="", structured=None, is_error=False, session_id=session_id, exchanges=exchanges,
            task=task,
        )  # fmt: skip
    content = [c for c in result.get("content") or [] if isinstance(c, dict)]
    structured = result.get("structuredContent")
    text = "\n".join(content_text(c) for c in content)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    return ToolOutcome(
        text=text, structured=structured, is_error=bool(result.get("isError")),
        session_id=session_id, exchanges=exchanges, content=content,
    )  # fmt: skip


def content_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource":
        resource = block.get("resource") or {}
        return str(resource.get("text") or f"[resource: {resource.get('uri', '')}]")
    if kind == "resource_link":
        return f"[resource: {block.get('uri', '')}]"
    if kind in ("image", "audio"):
        return f"[{kind}: {block.get('mimeType', 'unknown')}]"
    return json.dumps(block, ensure_ascii=False)

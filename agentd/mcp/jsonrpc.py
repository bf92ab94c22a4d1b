"""JSON-RPC 2.0 envelope helpers shared by the MCP client, transports and Toolset."""

from __future__ import annotations

import itertools
import json
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

_ids = itertools.count(1)


def next_id() -> int:
    return next(_ids)


def request(
    method: str, params: dict[str, Any] | None = None, *, id: int | str | None = None
) -> dict[str, Any]:
    envelope: dict[str, Any] = {"jsonrpc": "2.0", "id": next_id() if id is None else id}
    envelope["method"] = method
    if params is not None:
        envelope["params"] = params
    return envelope


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    envelope: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        envelope["params"] = params
    return envelope


def result(id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": value}


def error(id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": err}


def is_notification(envelope: dict[str, Any]) -> bool:
    return "method" in envelope and "id" not in envelope


def is_response(envelope: Any) -> bool:
    return (
        isinstance(envelope, dict)
        and "id" in envelope
        and ("result" in envelope or "error" in envelope)
    )


def error_of(body: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `error` member of a response envelope, or None."""
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else None


def describe_error(err: dict[str, Any]) -> str:
    return f"MCP error {err.get('code')}: {err.get('message', '')}".rstrip()


def dumps(envelope: Any) -> str:
    """The exact bytes we put on the wire (compact, UTF-8 kept readable)."""
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)


def is_server_request(message: Any) -> bool:
    """A request the server sent to the client (elicitation, sampling, roots, ping)."""
    return isinstance(message, dict) and "method" in message and "id" in message


def refusal(message: dict[str, Any]) -> dict[str, Any]:
    """agentd's answer to a server→client request mid-call: ping is answered, the rest
    refused (a person's answer cannot be awaited on a held connection)."""
    if message.get("method") == "ping":
        return result(message.get("id"), {})
    return error(
        message.get("id"),
        METHOD_NOT_FOUND,
        f"agentd does not answer {message.get('method')} on a held connection; it supports "
        "user input only with MCP 2026-07-28 servers (InputRequiredResult)",
    )

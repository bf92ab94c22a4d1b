"""JSON-RPC 2.0 envelope helpers shared by the MCP client, transports and Toolset."""

from __future__ import annotations

import itertools
import json
from typing import Any, NoReturn, TypeAlias

from agentd.json_types import JSONValue
from agentd.mcp import schemas  # deep nesting is read bounded, never a RecursionError

#: The id a request carries and its answer echoes: MCP allows a string or an integer; an
#: answer to a message whose id could not be read carries null.
RequestId: TypeAlias = str | int | None

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


def result(id: RequestId, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": value}


def error(id: RequestId, code: int, message: str, data: JSONValue = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": err}


def is_notification(envelope: dict[str, Any]) -> bool:
    return "method" in envelope and "id" not in envelope


def is_response(envelope: object) -> bool:
    return (
        isinstance(envelope, dict)
        and "id" in envelope
        and ("result" in envelope or "error" in envelope)
    )


def error_of(body: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `error` member of a response envelope, or None."""
    err = body.get("error") if isinstance(body, dict) else None
    return err if isinstance(err, dict) else None


def describe_error(err: dict[str, Any]) -> str:
    return f"MCP error {err.get('code')}: {err.get('message', '')}".rstrip()


def dumps(envelope: object, *, allow_nan: bool = True) -> str:
    """The exact text we put on the wire (compact, UTF-8 kept readable).

    It always encodes as UTF-8: a lone surrogate (from a `"\\ud800"` escape) stays
    escaped. `allow_nan=False` (what a server answers with) raises ValueError on
    NaN/Infinity instead of emitting them, since they are not JSON.
    """
    compact = (",", ":")
    text = json.dumps(envelope, separators=compact, ensure_ascii=False, allow_nan=allow_nan)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(envelope, separators=compact, ensure_ascii=True, allow_nan=allow_nan)
    return text


class NotJson(ValueError):
    """The text used NaN, Infinity or -Infinity: JavaScript, not JSON."""


def _no_constants(name: str) -> NoReturn:
    raise NotJson(f"{name} is not valid JSON")


def loads(text: str | bytes) -> JSONValue:
    """Strict JSON: NaN / Infinity raise `NotJson` (Python's json accepts them)."""
    return schemas.parse(text, parse_constant=_no_constants)


def invalid_envelope(envelope: object) -> str | None:
    """Why `envelope` is not a JSON-RPC 2.0 request, notification or response (MCP rules:
    an id is a string or an integer, never null; params are an object), or None."""
    if not isinstance(envelope, dict):
        return "the message must be a JSON object"
    if envelope.get("jsonrpc") != "2.0":
        return 'the "jsonrpc" member must be exactly "2.0"'
    if "id" in envelope:
        ident = envelope["id"]
        if isinstance(ident, bool) or not isinstance(ident, str | int):
            return 'the "id" member must be a string or an integer'
    if "method" in envelope:
        if not isinstance(envelope["method"], str) or not envelope["method"]:
            return 'the "method" member must be a non-empty string'
        if "params" in envelope and not isinstance(envelope["params"], dict):
            return 'the "params" member must be an object'
        if "result" in envelope or "error" in envelope:
            return "a request cannot carry a result or an error"
        return None
    if "id" not in envelope or ("result" in envelope) == ("error" in envelope):
        return "a response needs an id and exactly one of result or error"
    return None


def is_server_request(message: object) -> bool:
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

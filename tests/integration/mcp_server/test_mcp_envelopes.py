"""Class tests for the mounted endpoint: every invalid JSON-RPC envelope shape with every
method, in both eras, is answered -32600 without dispatching; every hostile string in every
parameter gets a JSON answer (never a 500, never NaN) and, on a session, its audit event."""

from __future__ import annotations

import json
from typing import Any

import httpx
import mcp_server_fixtures as fx
import pytest

from agentd.db.pool import Pool
from agentd.mcp import eras

ALICE = {"Authorization": "Bearer alice-token"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}

METHODS: dict[str, dict[str, Any]] = {
    "initialize": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "pytest", "version": "1"},
    },
    "ping": {},
    "tools/list": {},
    "tools/call": {"name": "echo", "arguments": {"text": "hi"}},
    "prompts/list": {},
    "prompts/get": {"name": "echo_prompt", "arguments": {"text": "hi"}},
    "resources/list": {},
    "server/discover": {},
}

# (label, raw envelope text with METHOD and PARAMS placeholders). NaN/Infinity are not JSON,
# so the shapes are written as text.
SHAPES = {
    "id null": '{"jsonrpc":"2.0","id":null,"method":METHOD,"params":PARAMS}',
    "id object": '{"jsonrpc":"2.0","id":{"a":1},"method":METHOD,"params":PARAMS}',
    "id array": '{"jsonrpc":"2.0","id":[1],"method":METHOD,"params":PARAMS}',
    "id true": '{"jsonrpc":"2.0","id":true,"method":METHOD,"params":PARAMS}',
    "id fraction": '{"jsonrpc":"2.0","id":1.5,"method":METHOD,"params":PARAMS}',
    "id NaN": '{"jsonrpc":"2.0","id":NaN,"method":METHOD,"params":PARAMS}',
    "id Infinity": '{"jsonrpc":"2.0","id":Infinity,"method":METHOD,"params":PARAMS}',
    "NaN in params": '{"jsonrpc":"2.0","id":1,"method":METHOD,"params":{"x":NaN}}',
    "jsonrpc 1.0": '{"jsonrpc":"1.0","id":1,"method":METHOD,"params":PARAMS}',
    "jsonrpc number": '{"jsonrpc":2.0,"id":1,"method":METHOD,"params":PARAMS}',
    "no jsonrpc": '{"id":1,"method":METHOD,"params":PARAMS}',
    "params array": '{"jsonrpc":"2.0","id":1,"method":METHOD,"params":[1,2]}',
    "params string": '{"jsonrpc":"2.0","id":1,"method":METHOD,"params":"x"}',
    "request with result": '{"jsonrpc":"2.0","id":1,"method":METHOD,"params":PARAMS,"result":{}}',
    "bare array": "[]",
    "bare string": '"x"',
    "bare number": "7",
    "empty object": "{}",
}

HOSTILE = [
    "\ud800",  # a lone surrogate: valid as a JSON escape, not encodable as UTF-8
    "\udfff tail",
    "\x00",
    "a\x00b",
    "\u202eevil",
    "\ufeff",
    "🦀" * 50,
    "line\r\nX-Injected: 1",
    "'; DROP TABLE events; --",
    "{{7*7}}${7*7}%s%n",
    "=?base64?AAAA?=",
    "x" * 1500,
]


def shaped(shape: str, method: str, params: dict[str, Any]) -> bytes:
    text = SHAPES[shape].replace("METHOD", json.dumps(method)).replace("PARAMS", json.dumps(params))
    return text.encode()


def raw(envelope: dict[str, Any]) -> bytes:
    # ensure_ascii keeps lone surrogates as `\ud800` escapes: what a hostile client sends.
    return json.dumps(envelope, ensure_ascii=True).encode()


def strict_json(response: httpx.Response) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"the answer contains {name}, which is not JSON")

    return json.loads(response.content, parse_constant=refuse)


async def initialize(client: httpx.AsyncClient) -> str:
    body = raw({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": METHODS["initialize"]})
    response = await client.post("/mcp/hostile", content=body, headers=_headers())
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


def _headers(**extra: str) -> dict[str, str]:
    return {**ALICE, "Content-Type": "application/json", **extra}


def modern_headers(method: str, params: dict[str, Any]) -> dict[str, str]:
    headers = _headers(**{"MCP-Protocol-Version": eras.MODERN_VERSION, "Mcp-Method": method})
    key = {"tools/call": "name", "prompts/get": "name"}.get(method)
    if key and isinstance(params.get(key), str):
        headers["Mcp-Name"] = eras.encode_header_value(params[key])
    return headers


async def event_count(pool: Pool, session_id: str) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM events e JOIN mcp_inbound_sessions s"
            " ON e.inbound_session_id = s.id WHERE s.session_id = $1",
            session_id,
        )
    )


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_every_invalid_envelope_with_every_method_is_32600_and_never_dispatched(
    client: httpx.AsyncClient, era: str
) -> None:
    session = _headers(**{"Mcp-Session-Id": await initialize(client)})
    wrong: list[str] = []
    for method in sorted(METHODS):
        params = METHODS[method]
        headers = session
        if era == "modern":
            params = {**params, "_meta": MODERN_META}
            headers = modern_headers(method, params)
        for shape in sorted(SHAPES):
            before = dict(fx.hostile.dispatched)
            body = shaped(shape, method, params)
            response = await client.post("/mcp/hostile", content=body, headers=headers)
            answer = strict_json(response)
            if response.status_code != 400 or answer.get("error", {}).get("code") != -32600:
                wrong.append(f"{method} / {shape}: {response.status_code} {response.text[:120]}")
            if not (answer.get("id") is None or isinstance(answer.get("id"), int | str)):
                wrong.append(f"{method} / {shape}: answered with id {answer.get('id')!r}")
            if dict(fx.hostile.dispatched) != before:
                wrong.append(f"{method} / {shape}: reached the dispatcher")
    assert wrong == []


def _hostile_cases() -> list[tuple[str, str, Any]]:
    """(method, where, params builder) for every string parameter of every method."""
    cases: list[tuple[str, str, Any]] = []
    for where in (
        "name",
        "arguments.text",
        "arguments.note",
        "_meta.idempotency",
        "_meta.progress",
    ):
        cases.append(("tools/call", where, where))
    for where in ("name", "arguments.text"):
        cases.append(("prompts/get", where, where))
    for where in ("protocolVersion", "clientInfo.name", "clientInfo.version"):
        cases.append(("initialize", where, where))
    cases.append(("resources/read", "uri", "uri"))
    cases.append(("tools/list", "cursor", "cursor"))
    return cases


def hostile_params(method: str, where: str, value: str) -> dict[str, Any]:
    if method == "tools/call":
        params: dict[str, Any] = {
            "name": "echo_structured",
            "arguments": {"text": "t", "note": "n"},
        }
    elif method == "prompts/get":
        params = {"name": "echo_prompt", "arguments": {"text": "t"}}
    elif method == "initialize":
        params = json.loads(json.dumps(METHODS["initialize"]))
    else:
        params = {}
    if where == "_meta.idempotency":
        params["_meta"] = {"agentd/idempotencyKey": value}
    elif where == "_meta.progress":
        params["_meta"] = {"progressToken": value}
    elif "." in where:
        outer, inner = where.split(".")
        params[outer][inner] = value
    else:
        params[where] = value
    return params


async def test_every_hostile_string_in_every_parameter_gets_json_and_an_audit_event(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    session_id = await initialize(client)
    headers = _headers(**{"Mcp-Session-Id": session_id})
    wrong: list[str] = []
    for method, where, _ in _hostile_cases():
        for value in HOSTILE:
            label = f"{method} {where}={value[:12]!r}"
            params = hostile_params(method, where, value)
            envelope = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
            if method == "initialize":
                response = await client.post(
                    "/mcp/hostile", content=raw(envelope), headers=_headers()
                )
                if response.status_code >= 500:
                    wrong.append(f"{label}: {response.status_code}")
                strict_json(response)
                minted = response.headers.get("mcp-session-id")
                if minted and await event_count(pool, minted) != 1:
                    wrong.append(f"{label}: no audit event for the new session")
                continue
            before = await event_count(pool, session_id)
            response = await client.post("/mcp/hostile", content=raw(envelope), headers=headers)
            if response.status_code >= 500:
                wrong.append(f"{label}: {response.status_code} {response.text[:120]}")
            if strict_json(response).get("id") != 7:
                wrong.append(f"{label}: the answer lost the id")
            if await event_count(pool, session_id) != before + 1:
                wrong.append(f"{label}: no audit event was written")
    assert wrong == []


async def test_every_hostile_string_in_a_modern_tool_call_is_echoed_as_json(
    client: httpx.AsyncClient,
) -> None:
    for value in HOSTILE:
        params = {"name": "echo", "arguments": {"text": value}, "_meta": MODERN_META}
        envelope = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
        response = await client.post(
            "/mcp/hostile", content=raw(envelope), headers=modern_headers("tools/call", params)
        )
        assert response.status_code == 200, (value, response.text)
        assert strict_json(response)["result"]["content"][0]["text"] == value


async def test_a_session_request_with_an_unknown_protocol_version_is_told_so(
    client: httpx.AsyncClient,
) -> None:
    session_id = await initialize(client)
    headers = _headers(**{"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2099-01-01"})
    envelope = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}
    before = dict(fx.hostile.dispatched)
    response = await client.post("/mcp/hostile", content=raw(envelope), headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == eras.UNSUPPORTED_PROTOCOL_VERSION
    assert error["data"]["requested"] == "2099-01-01"
    assert "2025-11-25" in error["data"]["supported"]
    assert "_meta" not in error["message"]
    assert dict(fx.hostile.dispatched) == before

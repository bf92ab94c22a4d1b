"""The mounted MCP endpoint, status by status (reference table: solidloop inventory §2.16)."""

from __future__ import annotations

from typing import Any

import httpx
import mcp_server_fixtures as fx
import pytest
from fastapi import FastAPI

from agentd.db.pool import Pool

ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def rpc(method: str, params: dict[str, Any] | None = None, id: int | None = 1) -> dict[str, Any]:
    envelope: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if id is not None:
        envelope["id"] = id
    return envelope


async def initialize(client: httpx.AsyncClient, path: str = "/mcp/demo", **headers: str) -> str:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "pytest", "version": "1"},
    }
    response = await client.post(path, json=rpc("initialize", params), headers={**ALICE, **headers})
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


def modern(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {**ALICE, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, **extra}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


async def session_row(pool: Pool, session_id: str) -> dict[str, Any]:
    row = await pool.fetchrow(
        "SELECT * FROM mcp_inbound_sessions WHERE session_id = $1", session_id
    )
    assert row is not None
    return dict(row)


async def events_of(pool: Pool, row_id: int) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT * FROM events WHERE inbound_session_id = $1 ORDER BY id", row_id
    )
    return [dict(r) for r in rows]


async def test_initialize_creates_a_session_row_and_returns_its_id(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    session_id = await initialize(client)
    row = await session_row(pool, session_id)
    assert (row["server_name"], row["principal"]) == ("demo", "alice")
    assert row["protocol_version"] == "2025-11-25" and row["terminated_at"] is None
    [event] = await events_of(pool, row["id"])
    assert event["name"] == "mcp_inbound.initialize" and event["loop_id"] is None
    assert '"method":"initialize"' in event["request_data"]["raw"]
    assert event["request_data"]["headers"]["authorization"] == "[REDACTED]"
    assert "alice-token" not in str(event)
    assert '"protocolVersion":"2025-11-25"' in event["response_data"]["raw"]
    assert event["status"] == 200 and "principal: alice" in event["log"]


async def test_on_initialize_mints_the_session_id(client: httpx.AsyncClient, pool: Pool) -> None:
    session_id = await initialize(client, "/mcp/minting")
    assert session_id == "minted-pytest-alice"
    assert (await session_row(pool, session_id))["server_name"] == "minting"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Basic YWxpY2U6eA=="}, {"Authorization": "Bearer nope"}],
    ids=["absent", "other-scheme", "unknown-token"],
)
async def test_a_refused_principal_gets_401_with_an_empty_body(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    fx.seen_tokens.clear()
    response = await client.post("/mcp/demo", json=rpc("tools/list"), headers=headers)
    assert (response.status_code, response.content) == (401, b"")
    expected = "nope" if "Bearer" in headers.get("Authorization", "") else None
    assert fx.seen_tokens == [expected]
    metadata = "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp/demo"
    assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata}"'


async def test_protected_resource_metadata_says_bearer_header_and_no_authorization_server(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/.well-known/oauth-protected-resource/mcp/demo")
    assert response.status_code == 200
    assert response.json() == {
        "resource": "http://127.0.0.1:8080/mcp/demo",
        "resource_name": "agentd MCP server demo",
        "bearer_methods_supported": ["header"],
    }
    assert "authorization_servers" not in response.json()


async def test_requests_need_a_live_session_of_their_own_principal(
    client: httpx.AsyncClient,
) -> None:
    no_header = await client.post("/mcp/demo", json=rpc("tools/list"), headers=ALICE)
    assert no_header.status_code == 400
    unknown = {**ALICE, "Mcp-Session-Id": "nope"}
    assert (
        await client.post("/mcp/demo", json=rpc("tools/list"), headers=unknown)
    ).status_code == 404
    session_id = await initialize(client)
    theirs = {**BOB, "Mcp-Session-Id": session_id}
    assert (
        await client.post("/mcp/demo", json=rpc("tools/list"), headers=theirs)
    ).status_code == 404
    mine = {**ALICE, "Mcp-Session-Id": session_id}
    listed = await client.post("/mcp/demo", json=rpc("tools/list"), headers=mine)
    assert listed.status_code == 200
    assert listed.headers["content-type"] == "application/json"
    assert "whoami" in [t["name"] for t in listed.json()["result"]["tools"]]


async def test_delete_terminates_the_session_but_keeps_the_row(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    session_id = await initialize(client)
    headers = {**ALICE, "Mcp-Session-Id": session_id}
    assert (await client.delete("/mcp/demo", headers=headers)).status_code == 200
    assert (await client.post("/mcp/demo", json=rpc("ping"), headers=headers)).status_code == 404
    assert (await client.delete("/mcp/demo", headers=headers)).status_code == 404
    row = await session_row(pool, session_id)
    assert row["terminated_at"] is not None
    names = [e["name"] for e in await events_of(pool, row["id"])]
    assert names == ["mcp_inbound.initialize", "mcp_inbound.terminate"]


async def test_notifications_get_202_and_are_not_dispatched(
    app: FastAPI, client: httpx.AsyncClient, pool: Pool
) -> None:
    toolset = app.state.mounts["demo"].toolset
    session_id = await initialize(client)
    before = sum(toolset.dispatched.values())
    headers = {**ALICE, "Mcp-Session-Id": session_id}
    note = rpc("notifications/initialized", id=None)
    response = await client.post("/mcp/demo", json=note, headers=headers)
    assert (response.status_code, response.content) == (202, b"")
    assert sum(toolset.dispatched.values()) == before
    row = await session_row(pool, session_id)
    assert [e["name"] for e in await events_of(pool, row["id"])][-1] == (
        "mcp_inbound.notifications/initialized"
    )


async def test_malformed_bodies_are_json_rpc_errors(client: httpx.AsyncClient) -> None:
    session_id = await initialize(client)
    headers = {**ALICE, "Mcp-Session-Id": session_id, "Content-Type": "application/json"}
    batch = await client.post("/mcp/demo", json=[rpc("ping"), rpc("ping", id=2)], headers=headers)
    assert batch.json()["error"]["code"] == -32600
    garbage = await client.post("/mcp/demo", content=b"{not json", headers=headers)
    assert garbage.json()["error"]["code"] == -32700
    shapeless = await client.post("/mcp/demo", json={"jsonrpc": "2.0", "id": 3}, headers=headers)
    assert shapeless.json()["id"] == 3
    assert shapeless.json()["error"]["code"] == -32600
    assert shapeless.json()["error"]["message"].startswith("Invalid Request")


async def test_get_is_405_because_there_is_no_sse_stream(client: httpx.AsyncClient) -> None:
    response = await client.get("/mcp/demo", headers=ALICE)
    assert response.status_code == 405 and "POST" in response.headers["allow"]


async def test_bodies_over_the_limit_are_refused_with_413(client: httpx.AsyncClient) -> None:
    session_id = await initialize(client)
    headers = {**ALICE, "Mcp-Session-Id": session_id}
    big = rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2, "pad": "x" * 5000}})
    assert (await client.post("/mcp/demo", json=big, headers=headers)).status_code == 413


async def test_handlers_get_the_principal_and_the_inbound_idempotency_key(
    client: httpx.AsyncClient,
) -> None:
    session_id = await initialize(client)
    headers = {**ALICE, "Mcp-Session-Id": session_id}
    params = {"name": "whoami", "arguments": {}, "_meta": {"agentd/idempotencyKey": "order-7"}}
    response = await client.post("/mcp/demo", json=rpc("tools/call", params), headers=headers)
    assert response.json()["result"]["structuredContent"] == {
        "principal": "alice",
        "idempotency_key": "order-7",
        "has_loop": False,
        "has_agent": False,
    }


async def test_a_handler_exception_message_becomes_is_error_text(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    session_id = await initialize(client)
    headers = {**ALICE, "Mcp-Session-Id": session_id}
    params = {"name": "test_error_handling", "arguments": {}}
    result = (
        await client.post("/mcp/demo", json=rpc("tools/call", params), headers=headers)
    ).json()
    assert result["result"]["isError"] is True
    assert result["result"]["content"][0]["text"] == (
        "This tool intentionally returns an error for testing"
    )
    row = await session_row(pool, session_id)
    last = (await events_of(pool, row["id"]))[-1]
    assert (
        last["name"] == "mcp_inbound.tools/call"
        and '"isError":true' in last["response_data"]["raw"]
    )


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "evil.example.com"}, 421),
        ({"Origin": "http://evil.example.com"}, 403),
        ({"Origin": "http://localhost:5173"}, 200),
        ({"Host": "[::1]:8080"}, 200),
    ],
)
async def test_host_and_origin_are_checked_against_dns_rebinding(
    client: httpx.AsyncClient, headers: dict[str, str], status: int
) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}}
    response = await client.post(
        "/mcp/demo", json=rpc("initialize", params), headers={**ALICE, **headers}
    )
    assert response.status_code == status


async def test_allowed_hosts_admit_a_configured_name(client: httpx.AsyncClient) -> None:
    assert await initialize(client, "/mcp/minting", Host="mcp.example.com")
    refused = await client.post("/mcp/demo", json=rpc("ping"), headers={"Host": "mcp.example.com"})
    assert refused.status_code == 421


# -- 2026-07-28 era ------------------------------------------------------------------------


async def test_modern_clients_discover_and_call_without_a_session(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    discover = await client.post(
        "/mcp/demo",
        json=rpc("server/discover", {"_meta": MODERN_META}),
        headers=modern("server/discover"),
    )
    assert discover.status_code == 200 and "mcp-session-id" not in discover.headers
    result = discover.json()["result"]
    assert result["supportedVersions"] == ["2026-07-28"] and "prompts" in result["capabilities"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "demo"
    params = {
        "name": "whoami",
        "arguments": {},
        "_meta": {**MODERN_META, "agentd/idempotencyKey": "k"},
    }
    call = await client.post(
        "/mcp/demo", json=rpc("tools/call", params), headers=modern("tools/call", "whoami")
    )
    body = call.json()["result"]
    assert body["structuredContent"]["principal"] == "alice" and body["resultType"] == "complete"
    assert body["structuredContent"]["idempotency_key"] == "k"
    rows = await pool.fetch("SELECT * FROM mcp_inbound_sessions")
    assert len(rows) == 1 and rows[0]["session_id"].startswith("stateless:demo:")
    assert rows[0]["principal"] == "alice" and rows[0]["protocol_version"] == "2026-07-28"
    names = [e["name"] for e in await events_of(pool, rows[0]["id"])]
    assert names == ["mcp_inbound.server/discover", "mcp_inbound.tools/call"]


async def test_each_principal_gets_its_own_pseudo_session(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    for headers in (modern("tools/list"), modern("tools/list"), {**modern("tools/list"), **BOB}):
        ok = await client.post(
            "/mcp/demo", json=rpc("tools/list", {"_meta": MODERN_META}), headers=headers
        )
        assert ok.status_code == 200
    principals = await pool.fetch("SELECT principal FROM mcp_inbound_sessions ORDER BY principal")
    assert [r["principal"] for r in principals] == ["alice", "bob"]


@pytest.mark.parametrize(
    ("method", "params", "headers", "status", "code"),
    [
        ("initialize", {"_meta": MODERN_META}, {}, 404, -32601),
        ("ping", {"_meta": MODERN_META}, {}, 404, -32601),
        ("tools/list", {}, {}, 400, -32602),
        ("tools/list", {"_meta": MODERN_META}, {"Mcp-Method": "prompts/list"}, 400, -32020),
        ("tools/call", {"name": "add", "_meta": MODERN_META}, {"Mcp-Name": "whoami"}, 400, -32020),
        ("resources/list", {"_meta": MODERN_META}, {}, 404, -32601),
    ],
)
async def test_modern_requests_are_validated_per_request(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    headers: dict[str, str],
    status: int,
    code: int,
) -> None:
    response = await client.post(
        "/mcp/demo", json=rpc(method, params, id=42), headers={**modern(method), **headers}
    )
    assert response.status_code == status
    assert response.json()["id"] == 42 and response.json()["error"]["code"] == code


async def test_unsupported_protocol_versions_are_told_what_is_supported(
    client: httpx.AsyncClient,
) -> None:
    meta = {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    headers = {**modern("tools/list"), "MCP-Protocol-Version": "2099-01-01"}
    response = await client.post(
        "/mcp/demo", json=rpc("tools/list", {"_meta": meta}), headers=headers
    )
    assert response.status_code == 400
    assert response.json()["error"]["data"]["supported"] == ["2026-07-28"]


async def test_modern_requests_still_need_the_authorizer(client: httpx.AsyncClient) -> None:
    headers = {k: v for k, v in modern("tools/list").items() if k != "Authorization"}
    response = await client.post(
        "/mcp/demo", json=rpc("tools/list", {"_meta": MODERN_META}), headers=headers
    )
    assert (response.status_code, response.content) == (401, b"")

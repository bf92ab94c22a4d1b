"""Hostile MCP clients against a mounted MCP endpoint (`/mcp/<name>` of the full app):
random bodies, wrong JSON-RPC shapes, bad headers. Every answer is a JSON-RPC error or a 4xx
(or a valid result), never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_hostile_api import HOSTILE, Harness

from agentd.mcp.toolset import Toolset

MCP_TOKEN = "hostile-mcp-token"
tools = Toolset("hostile", version="1.0.0")


@tools.tool(description="Echo the text back")
def echo(text: str) -> str:
    return text


def authorizer(token: str | None, request: Any) -> str | None:
    return "tester" if token == MCP_TOKEN else None


MOUNT = {
    "toolset": "test_hostile_mcp_mount:tools",
    "authorizer": "test_hostile_mcp_mount:authorizer",
    "allowed_hosts": ["agentd.test"],
}
HEADERS = {
    "Authorization": f"Bearer {MCP_TOKEN}",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


@pytest.fixture
def harness(database_url: str) -> Iterator[Harness]:
    h = Harness(database_url, mcp_servers={"hostile": MOUNT})
    try:
        yield h
    finally:
        h.close()


def session(h: Harness) -> str | None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "0"},
        },
    }
    r = h.request("POST", "/mcp/hostile", json=init, headers=HEADERS)
    assert r.status_code == 200, r.text
    return r.headers.get("mcp-session-id")


scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=12)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | values,
        "id": st.integers() | st.text(max_size=5) | st.none() | values,
        "method": st.sampled_from(
            ["initialize", "tools/list", "tools/call", "ping", "prompts/get", "resources/read",
             "notifications/initialized", "nope", ""]
        ) | values,
        "params": values | st.fixed_dictionaries(
            {}, optional={"name": st.sampled_from(["echo", "nope"]) | values, "arguments": values,
                          "_meta": values}
        ),
    },
)  # fmt: skip
raw_bodies = st.one_of(
    envelopes.map(lambda e: json.dumps(e).encode()),
    st.lists(envelopes, max_size=3).map(lambda e: json.dumps(e).encode()),
    st.binary(max_size=100),
    st.sampled_from([b"", b"{", b"[]", b"null", b'"x"', b"\xff", b'{"jsonrpc":"2.0","id":1}']),
)


@HOSTILE
@given(data=st.data())
def test_the_mcp_mount_answers_hostile_bodies_without_a_500(
    harness: Harness, data: st.DataObject
) -> None:
    sid = session(harness) if data.draw(st.booleans()) else None
    headers = dict(HEADERS)
    if sid:
        headers["Mcp-Session-Id"] = data.draw(st.sampled_from([sid, "bogus", "x" * 300]))
    if data.draw(st.booleans()):
        headers["MCP-Protocol-Version"] = data.draw(
            st.sampled_from(["2025-06-18", "2026-07-28", "1999-01-01", "garbage"])
        )
    headers["Content-Type"] = data.draw(st.sampled_from(["application/json", "text/plain"]))
    method = data.draw(st.sampled_from(["POST", "POST", "POST", "GET", "DELETE", "PUT"]))
    body = data.draw(raw_bodies) if method == "POST" else None
    r = harness.request(method, "/mcp/hostile", content=body, headers=headers)
    assert r.status_code < 500, (method, body, r.status_code, r.text[:300])
    if r.status_code == 200 and r.headers.get("content-type", "").startswith("application/json"):
        json.loads(r.text)

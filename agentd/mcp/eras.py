"""The two MCP protocol eras: handshake (initialize + Mcp-Session-Id) and stateless 2026-07-28.

A 2026-07-28 server is probed with `server/discover`; every later request carries the
protocol version, client capabilities and client info in `params._meta` and mirrors the
routing fields into `MCP-Protocol-Version` / `Mcp-Method` / `Mcp-Name` headers.
"""

from __future__ import annotations

import base64
import copy
import re
from typing import Any, Literal

from mcp_types.methods import CACHEABLE_METHODS

from agentd.__about__ import __version__
from agentd.mcp import jsonrpc

Era = Literal["handshake", "modern"]

MODERN_VERSION = "2026-07-28"
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION = HANDSHAKE_VERSIONS[-1]
CLIENT_INFO = {"name": "agentd", "version": __version__}
# 2026-07-28 only: a server's input requests come back as an InputRequiredResult, which
# agentd parks durably for a person (docs/tools.md, "Waiting on the world").
MODERN_CLIENT_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}

#: JSON-RPC error codes of the 2026-07-28 request ladder (mcp_types.jsonrpc).
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

# Method -> params key mirrored into the Mcp-Name header (the server checks they agree).
_NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_HEADER_SAFE = re.compile(r"^[\x20-\x7E]*$")


def encode_header_value(value: str) -> str:
    """Printable ASCII passes verbatim; anything else is wrapped as `=?base64?...?=`."""
    if (
        _HEADER_SAFE.fullmatch(value)
        and value == value.strip()
        and not value.startswith("=?base64?")
    ):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="


def stamp(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A copy of `payload` with the modern `_meta` envelope, plus the routing headers."""
    stamped = copy.deepcopy(payload)
    params = stamped.setdefault("params", {})
    meta = params.setdefault("_meta", {})
    meta.setdefault(META_PROTOCOL_VERSION, MODERN_VERSION)
    meta.setdefault(META_CLIENT_CAPABILITIES, copy.deepcopy(MODERN_CLIENT_CAPABILITIES))
    meta.setdefault(META_CLIENT_INFO, CLIENT_INFO)
    headers = {"MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": str(payload.get("method"))}
    key = _NAME_BEARING.get(str(payload.get("method")))
    if key and isinstance(params.get(key), str):
        headers["Mcp-Name"] = encode_header_value(params[key])
    return stamped, headers


def supported_versions(err: dict[str, Any]) -> list[str]:
    """The versions an "unsupported protocol version" error says the server speaks."""
    data = err.get("data")
    listed = data.get("supported") if isinstance(data, dict) else None
    return [v for v in listed if isinstance(v, str)] if isinstance(listed, list) else []


def discover_request() -> dict[str, Any]:
    return jsonrpc.request("server/discover", {})


def stamp_result(method: str, result: dict[str, Any], server_info: dict[str, Any]) -> None:
    """What a 2026-07-28 server adds to every result (in place): `resultType`, its
    serverInfo in `_meta`, and on list results the caching hints, here "never shared,
    never fresh for long" (results may depend on who asks)."""
    result.setdefault("resultType", "complete")
    if method in CACHEABLE_METHODS:
        result.setdefault("ttlMs", 0)
        result.setdefault("cacheScope", "private")
    meta = result.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta.setdefault(META_SERVER_INFO, server_info)
    result["_meta"] = meta


def is_modern_discovery(body: dict[str, Any] | None) -> bool:
    result = body.get("result") if isinstance(body, dict) else None
    return isinstance(result, dict) and MODERN_VERSION in (result.get("supportedVersions") or [])


def initialize_result_from_discovery(discovery: dict[str, Any]) -> dict[str, Any]:
    """A discover result shaped as an initialize result, so the client stays era-blind."""
    meta = discovery.get("_meta") or {}
    result: dict[str, Any] = {
        "protocolVersion": MODERN_VERSION,
        "capabilities": discovery.get("capabilities") or {},
        "serverInfo": meta.get(META_SERVER_INFO) or {},
    }
    if "instructions" in discovery:
        result["instructions"] = discovery["instructions"]
    result["_meta"] = {
        "agentd/era": "modern",
        "agentd/supportedVersions": discovery.get("supportedVersions"),
    }
    return result

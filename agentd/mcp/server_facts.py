"""What a process has learned about each MCP server URL: era, negotiated version, headers.

Transports are built per job, so anything learned on one job (the `server/discover`
probe's verdict, the handshake's negotiated `protocolVersion`, the tools' `x-mcp-header`
maps) lives in a `FactsBook`, keyed by URL, owned by the process's `McpHub` (mcp/hub.py)
and handed to every transport it builds. It is a cache of facts the server told us, never
of state we own: losing it (a restart) costs one probe, and a session or era error forgets
the URL so the next request re-probes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from mcp.shared import inbound

from agentd.mcp import eras, schemas


@dataclass
class ServerFacts:
    era: eras.Era | None = None
    #: handshake era: the version the server chose in `initialize` (sent as a header after).
    protocol_version: str | None = None
    #: 2026-07-28: tool name -> {argument path: x-mcp-header token}; None: never listed.
    param_headers: dict[str, dict[tuple[str, ...], str]] | None = None
    #: `server/discover` probes sent to this URL by this process (observability, tests).
    probes: int = 0


class FactsBook:
    """The facts of every server URL one process has spoken to."""

    def __init__(self) -> None:
        self._facts: dict[str, ServerFacts] = {}
        #: the `server/discover` probe in flight per (URL, credentials): loops that start
        #: together share one (HttpTransport._probe).
        self.probes: dict[tuple[str, str | None], asyncio.Future[Any]] = {}

    def of(self, url: str) -> ServerFacts:
        """The facts for `url` (created empty on first use)."""
        found = self._facts.get(url)
        if found is None:
            found = self._facts[url] = ServerFacts()
        return found

    def forget(self, url: str) -> None:
        """A session or era error: the next request to `url` probes again. Probe counts stay."""
        self._facts[url] = ServerFacts(probes=self.of(url).probes)

    def remember_tools(self, url: str, tools: list[Any], *, first_page: bool) -> None:
        """Keep each listed tool's `x-mcp-header` map (2026-07-28 `tools/list` results)."""
        facts = self.of(url)
        if first_page or facts.param_headers is None:
            facts.param_headers = {}
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                continue
            schema = tool.get("inputSchema")
            if schemas.depth(schema, schemas.MAX_DEPTH) > schemas.MAX_DEPTH:
                continue  # McpClient drops it (mcp/schemas.py); the walk below would recurse
            if inbound.find_invalid_x_mcp_header(schema) is not None:
                continue  # McpClient drops such tools; never mirror a malformed annotation
            mapping = inbound.x_mcp_header_map(schema)
            if mapping:
                facts.param_headers[tool["name"]] = mapping
            else:
                facts.param_headers.pop(tool["name"], None)

    def param_headers(self, url: str, name: str, arguments: object) -> dict[str, str]:
        """The `Mcp-Param-*` headers a `tools/call` of `name` with `arguments` carries."""
        mapping = (self.of(url).param_headers or {}).get(name)
        if not mapping or not isinstance(arguments, dict):
            return {}
        return inbound.mcp_param_headers(mapping, arguments)

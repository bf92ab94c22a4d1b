"""`McpHub`: what one process knows about and shares with its MCP servers.

One per engine (engine/runtime.py), handed to every `McpClient` it builds: the pooled
HTTP client, the servers' facts (era, version, header maps; mcp/server_facts.py) and the
sessions and tool listings loops share (mcp/shared_sessions.py). A client built without
one gets a hub of its own, so nothing is shared by accident between two engines of one
process (tests) or with an ad-hoc client (the admin inspector).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from agentd.llm import http_pool
from agentd.mcp.server_facts import FactsBook
from agentd.mcp.shared_sessions import SharedSessions


class McpHub:
    def __init__(self, http: httpx.AsyncClient | None = None) -> None:
        #: the engine's pooled client for every MCP server; None: one per origin, below
        self.http = http
        self.facts = FactsBook()
        self.sessions = SharedSessions()
        self._clients: dict[str, httpx.AsyncClient] = {}

    def client_for(self, url: str) -> httpx.AsyncClient:
        """The HTTP client for `url`: the hub's own, else one per origin (building an
        AsyncClient and its TLS context per request was the cost). Those keep no
        connection alive, since nothing closes them: an idle socket would outlive its
        event loop. Timeouts come from each transport's asyncio.timeout."""
        if self.http is not None:
            return self.http
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        client = self._clients.get(origin)
        if client is None or client.is_closed:
            client = self._clients[origin] = http_pool.pooled_client(
                max_connections=100, max_keepalive=0, timeout=None
            )
        return client

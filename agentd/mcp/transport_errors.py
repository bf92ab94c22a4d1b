"""`map_transport_errors`: the one place library exceptions become agentd MCP errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx

from agentd.errors import AgentdError, McpError, ToolTimeout

# Most specific first: the first isinstance match wins.
_MAPPING: list[tuple[type[BaseException], str]] = [
    (httpx.ConnectTimeout, "timed out connecting"),
    (httpx.TimeoutException, "timed out"),
    (TimeoutError, "timed out"),
    (httpx.ConnectError, "could not connect"),
    (httpx.RemoteProtocolError, "broke the HTTP protocol (connection dropped?)"),
    (httpx.TransportError, "transport failed"),
    (ConnectionError, "connection failed"),
    (OSError, "I/O failed"),
    (UnicodeDecodeError, "sent undecodable bytes"),
]


@contextlib.contextmanager
def map_transport_errors(
    target: str, *, timeout: float, timeout_error: type[AgentdError] = McpError
) -> Iterator[None]:
    """Translate httpx / OS / timeout exceptions raised inside into `McpError` (or `ToolTimeout`).

    `target` names the server (URL or command) so the message says where it failed.
    """
    try:
        yield
    except AgentdError:
        raise
    except Exception as exc:
        for cls, what in _MAPPING:
            if isinstance(exc, cls):
                if what.startswith("timed out"):
                    raise timeout_error(f"MCP server {target} {what} after {timeout:g}s") from exc
                detail = str(exc) or type(exc).__name__
                raise McpError(f"MCP server {target} {what}: {detail}") from exc
        raise


__all__ = ["McpError", "ToolTimeout", "map_transport_errors"]

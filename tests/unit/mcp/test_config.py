from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentd.errors import ConfigError
from agentd.mcp.config import McpServerConfig
from agentd.mcp.http import HttpTransport
from agentd.mcp.stdio import StdioTransport
from agentd.mcp.toolset import Toolset
from agentd.mcp.transports import transport_for


def test_url_entry_builds_an_http_transport_with_token_headers_and_timeout() -> None:
    config = McpServerConfig(
        name="main", url="http://x/mcp", api_token="t", headers={"X-W": "1"}, timeout=5
    )
    transport = transport_for(config)
    assert isinstance(transport, HttpTransport)
    assert (transport.api_token, transport.headers, transport.timeout) == ("t", {"X-W": "1"}, 5)
    assert config.transport_kind == "http"


def test_command_entry_builds_a_stdio_transport() -> None:
    config = McpServerConfig(name="fs", command=["mcp-server", "/data"], env={"A": "1"}, cwd="/tmp")
    transport = transport_for(config)
    assert isinstance(transport, StdioTransport)
    assert transport.command == ["mcp-server", "/data"] and transport.env == {"A": "1"}


def test_toolset_entry_uses_the_toolset_itself() -> None:
    toolset = Toolset("search")
    config = McpServerConfig(name="search", toolset=toolset)
    assert transport_for(config) is toolset
    assert config.transport_kind == "local"


def test_unknown_key_is_rejected_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="unknown key 'custom_headerz'"):
        McpServerConfig.parse({"name": "m", "url": "http://x", "custom_headerz": {}})


def test_entry_needs_exactly_one_location() -> None:
    with pytest.raises(ValidationError, match="exactly one of"):
        McpServerConfig(name="m", url="http://x", command=["a"])
    with pytest.raises(ConfigError, match="exactly one of"):
        McpServerConfig.parse({"name": "m"})


def test_session_recovery_only_accepts_auto_or_fail() -> None:
    with pytest.raises(ConfigError, match="session_recovery"):
        McpServerConfig.parse({"name": "m", "url": "http://x", "session_recovery": "retry"})


def test_a_shell_string_command_is_rejected() -> None:
    with pytest.raises(ConfigError, match="command"):
        McpServerConfig.parse({"name": "m", "command": "npx server"})


def test_a_shared_session_is_for_http_servers_only() -> None:
    assert McpServerConfig(name="w", url="http://x/mcp").session == "auto"
    # "auto" is fine anywhere: only HTTP sessions are ever shared (mcp/toolbox.py).
    assert McpServerConfig(name="fs", command=["srv"]).session == "auto"
    shared = McpServerConfig(name="w", url="http://x/mcp", session="process", session_ttl=30)
    assert (shared.session, shared.session_ttl) == ("process", 30)
    with pytest.raises(ConfigError, match="url \\(HTTP\\) servers only"):
        McpServerConfig.parse({"name": "fs", "command": ["srv"], "session": "process"})
    with pytest.raises(ConfigError, match="session"):
        McpServerConfig.parse({"name": "w", "url": "http://x/mcp", "session": "global"})
    with pytest.raises(ConfigError, match="session_ttl"):
        McpServerConfig.parse({"name": "w", "url": "http://x/mcp", "session_ttl": 0})

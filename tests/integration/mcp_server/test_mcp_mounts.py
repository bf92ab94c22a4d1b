"""Building mounts from entry points and `[mcp_servers.NAME]` tables (fail-closed)."""

from __future__ import annotations

import importlib.metadata
from types import SimpleNamespace
from typing import Any

import httpx
import mcp_server_fixtures as fx
import pytest
from fastapi import FastAPI

from agentd.api import mcp_server
from agentd.db.pool import Pool
from agentd.errors import ConfigError
from agentd.mcp import mounts
from agentd.mcp.mounts import McpMount, TokenListAuthorizer
from agentd.settings import Settings

TOOLSET = "mcp_server_fixtures:demo"


def test_a_mount_without_an_authorizer_cannot_be_built() -> None:
    with pytest.raises(ConfigError, match="authorizer"):
        McpMount(toolset=fx.demo, authorizer=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"toolset": TOOLSET, "tokens_env": "X", "token": "oops"}, "unknown key 'token'"),
        ({"toolset": TOOLSET}, "exactly one of `authorizer` or `tokens_env`"),
        (
            {"toolset": TOOLSET, "tokens_env": "X", "authorizer": "mcp_server_fixtures:allow_all"},
            "exactly one",
        ),
        ({"authorizer": "mcp_server_fixtures:allow_all"}, "`toolset` is required"),
        ({"toolset": "mcp_server_fixtures.nothing", "tokens_env": "X"}, "package.module:attribute"),
        ({"toolset": "mcp_server_fixtures:missing", "tokens_env": "X"}, "cannot import"),
        ({"toolset": TOOLSET, "tokens_env": "AGENTD_TEST_UNSET_TOKENS"}, "unset"),
        (
            {
                "toolset": TOOLSET,
                "authorizer": "mcp_server_fixtures:allow_all",
                "allowed_hosts": "x",
            },
            "list of strings",
        ),
    ],
)
def test_bad_tables_are_config_errors(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        mounts.mount_from_table("demo", table)


def test_mount_names_must_be_path_segments() -> None:
    with pytest.raises(ConfigError, match="path segment"):
        mounts.mount_from_table("a/b", {"toolset": TOOLSET, "authorizer": "x:y"})


def test_the_token_list_authorizer_compares_every_listed_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTD_TEST_MCP_TOKENS", " first , second,")
    authorize = TokenListAuthorizer("AGENTD_TEST_MCP_TOKENS")
    first, second = authorize("first", None), authorize("second", None)
    assert first and second and first != second and first.startswith("token:")
    assert "first" not in first and "first" not in repr(authorize)
    assert authorize("third", None) is None and authorize(None, None) is None


def _entry_points(*pairs: tuple[str, str]) -> Any:
    eps = [
        importlib.metadata.EntryPoint(name=n, value=v, group=mounts.ENTRY_POINT_GROUP)
        for n, v in pairs
    ]
    return lambda group: [ep for ep in eps if ep.group == group]


def test_entry_points_give_mounts_or_factories_of_mounts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        _entry_points(
            ("made", "mcp_server_fixtures:demo_mount"), ("plain", "mcp_server_fixtures:demo")
        ),
    )
    with pytest.raises(ConfigError, match=r"'plain'.*not an McpMount"):
        mounts.load_mounts(Settings())
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        _entry_points(("made", "mcp_server_fixtures:demo_mount")),
    )
    found = mounts.load_mounts(Settings())
    assert list(found) == ["made"] and found["made"].toolset.name == "demo"
    table = {"toolset": TOOLSET, "authorizer": "mcp_server_fixtures:allow_all"}
    with pytest.raises(ConfigError, match="defined twice"):
        mounts.load_mounts(Settings(mcp_servers={"made": table}))


async def test_a_tokens_env_mount_serves_listed_tokens_only(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTD_TEST_MCP_TOKENS", "s3cret")
    settings = Settings(
        mcp_servers={"tools": {"toolset": TOOLSET, "tokens_env": "AGENTD_TEST_MCP_TOKENS"}}
    )
    app = FastAPI()
    mounted = mcp_server.mount_all(app, SimpleNamespace(settings=settings, pool=pool))  # type: ignore[arg-type]
    assert list(mounted) == ["tools"]
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "c"},
        },
    }
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        refused = await client.post("/mcp/tools", json=body, headers={"Authorization": "Bearer x"})
        ok = await client.post("/mcp/tools", json=body, headers={"Authorization": "Bearer s3cret"})
    assert refused.status_code == 401 and ok.status_code == 200
    principal = await pool.fetchval("SELECT principal FROM mcp_inbound_sessions")
    assert principal.startswith("token:") and "s3cret" not in principal

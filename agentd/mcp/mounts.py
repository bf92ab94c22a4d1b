"""MCP server mounts: which toolsets are served to external MCP clients at `/mcp/<name>`.

Mounts come from the entry-point group `agentd.mcp_servers` (entry name = path segment;
the value is an `McpMount`, or a zero-argument callable returning one) and from
`[mcp_servers.NAME]` tables of the config file. A mount cannot be built without an
authorizer: there is no anonymous mode unless the authorizer itself says so.
This module only defines and loads them; `agentd.api.mcp_server` serves them over HTTP.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import importlib.metadata
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agentd.errors import ConfigError
from agentd.mcp.port import CallContext

if TYPE_CHECKING:
    from starlette.requests import Request

    from agentd.settings import Settings

#: `(token, request) -> principal | None`, or an awaitable of it; None answers 401. The
#: principal is whatever the authorizer says it is: agentd logs its `str` and hands it to
#: tools as `CallContext.principal`.
Authorizer = Callable[[str | None, "Request"], object]


class Servable(Protocol):
    """What a mount serves: an `agentd.Toolset`, or anything with its `handle`."""

    async def handle(
        self,
        envelope: object,
        *,
        session_id: str | None = None,
        context: CallContext | None = None,
    ) -> tuple[dict[str, Any] | None, str | None]: ...


ENTRY_POINT_GROUP = "agentd.mcp_servers"
TOML_KEYS = frozenset({"toolset", "authorizer", "tokens_env", "allowed_hosts", "allowed_origins"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class McpMount:
    """One toolset, its authorizer and the extra Host/Origin values it accepts.

    Host and Origin are always accepted for localhost, 127.0.0.1 and [::1] (any port);
    `allowed_hosts` adds names (`"mcp.example.com"`, `"mcp.example.com:8443"`) and
    `allowed_origins` adds origins (`"https://ide.example.com"`, `"http://box:*"`).
    `"*"` switches the check off.
    """

    toolset: Servable
    authorizer: Authorizer
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.authorizer is None or not callable(self.authorizer):
            raise ConfigError("an MCP mount needs an authorizer (fail-closed)")
        if not callable(getattr(self.toolset, "handle", None)):
            raise ConfigError(f"an MCP mount needs a Toolset, got {self.toolset!r}")
        object.__setattr__(self, "allowed_hosts", tuple(self.allowed_hosts))
        object.__setattr__(self, "allowed_origins", tuple(self.allowed_origins))


class TokenListAuthorizer:
    """Accept any bearer token listed (comma-separated) in an environment variable.

    The variable is read once, here; a missing or empty one is a `ConfigError`. Every
    listed token is compared in constant time. The principal is `token:<sha256 prefix>`,
    stable across reorderings of the list and safe to log.
    """

    def __init__(self, env: str) -> None:
        raw = os.environ.get(env, "")
        tokens = [t.strip() for t in raw.split(",") if t.strip()]
        if not tokens:
            raise ConfigError(f"MCP tokens_env {env!r} is unset or holds no tokens")
        self.env = env
        self._tokens = [t.encode() for t in tokens]

    def __call__(self, token: str | None, request: object) -> str | None:
        if not token:
            return None
        given = token.encode()
        hits = [hmac.compare_digest(given, t) for t in self._tokens]  # no early exit
        if not any(hits):
            return None
        return f"token:{hashlib.sha256(given).hexdigest()[:12]}"

    def __repr__(self) -> str:
        return f"TokenListAuthorizer(env={self.env!r})"


def load_mounts(settings: Settings) -> dict[str, McpMount]:
    """Every mount by name: entry points first, then `[mcp_servers.*]`; duplicates fail."""
    found: dict[str, McpMount] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        check_name(ep.name, f"entry point {ep.value}")
        try:
            value = ep.load()
        except Exception as exc:
            raise ConfigError(f"MCP mount {ep.name!r}: cannot load {ep.value}: {exc}") from exc
        if not isinstance(value, McpMount) and callable(value):
            value = value()
        if not isinstance(value, McpMount):
            raise ConfigError(f"MCP mount {ep.name!r}: {ep.value} is not an McpMount")
        found[ep.name] = value
    for name, table in (getattr(settings, "mcp_servers", None) or {}).items():
        if name in found:
            raise ConfigError(f"MCP mount {name!r} is defined twice (entry point and config)")
        found[name] = mount_from_table(name, table)
    return found


def mount_from_table(name: str, table: dict[str, Any]) -> McpMount:
    """Build a mount from one `[mcp_servers.NAME]` table."""
    check_name(name, "[mcp_servers] table")
    unknown = sorted(set(table) - TOML_KEYS)
    if unknown:
        raise ConfigError(f"[mcp_servers.{name}]: unknown key {unknown[0]!r}")
    if "toolset" not in table:
        raise ConfigError(f"[mcp_servers.{name}]: `toolset` is required")
    toolset = _import(table["toolset"], f"[mcp_servers.{name}].toolset")
    if not callable(getattr(toolset, "handle", None)) and callable(toolset):
        toolset = toolset()  # a factory
    has_auth, has_env = "authorizer" in table, "tokens_env" in table
    if has_auth == has_env:
        raise ConfigError(
            f"[mcp_servers.{name}]: set exactly one of `authorizer` or `tokens_env` (fail-closed)"
        )
    if has_env:
        authorizer: Authorizer = TokenListAuthorizer(str(table["tokens_env"]))
    else:
        authorizer = _import(table["authorizer"], f"[mcp_servers.{name}].authorizer")
    return McpMount(
        toolset=toolset,
        authorizer=authorizer,
        allowed_hosts=tuple(_strings(table, "allowed_hosts", name)),
        allowed_origins=tuple(_strings(table, "allowed_origins", name)),
    )


def check_name(name: str, where: str) -> None:
    if not _NAME.fullmatch(name):
        raise ConfigError(f"MCP mount name {name!r} ({where}) must be a URL path segment")


def _import(target: object, where: str) -> Any:
    """The object `target` ("package.module:attribute") names: a toolset, a factory of one,
    or an authorizer, known only once imported."""
    if not isinstance(target, str) or ":" not in target:
        raise ConfigError(f"{where} must be 'package.module:attribute', got {target!r}")
    module_name, _, attr = target.partition(":")
    try:
        value: object = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where}: cannot import {target!r}: {exc}") from exc
    return value


def _strings(table: dict[str, Any], key: str, name: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[mcp_servers.{name}].{key} must be a list of strings")
    return value

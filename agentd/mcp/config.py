"""One `mcps` entry of an agent: where its MCP server lives and how to talk to it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SkipValidation,
    ValidationError,
    model_validator,
)

from agentd.errors import ConfigError
from agentd.mcp.port import Transport
from agentd.mcp.toolset import Toolset

_WHERE = ("url", "command", "toolset", "transport")


class McpServerConfig(BaseModel):
    """Exactly one of `url` (Streamable HTTP), `command` (stdio, argv list),
    `toolset` (an in-process `Toolset`) or `transport` (any object with the port's shape)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str = Field(min_length=1)
    url: str | None = None
    api_token: str | None = Field(default=None, repr=False)
    headers: dict[str, str] = Field(default_factory=dict)
    tools: list[str] | None = None  # whitelist of remote tool names
    required_tools: list[str] = Field(default_factory=list)
    prefix: str | None = None
    session_recovery: Literal["auto", "fail"] = "auto"
    #: "loop": each loop opens its own session (a stateful server keeps loops apart);
    #: "process": one session and one tool listing per worker process serve every loop;
    #: "auto": "process" for an HTTP server that issues no session id, else a session per
    #: loop with the tool listing cached per server version (mcp/shared_sessions.py).
    session: Literal["auto", "loop", "process"] = "auto"
    #: "process"/"auto": seconds before a shared session or cached tool list is renewed.
    session_ttl: float = Field(default=300.0, gt=0)
    timeout: float = Field(default=60.0, gt=0)
    command: list[str] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    # Not checked by type: anything with a deliver() is accepted (the validator below).
    toolset: Annotated[Toolset | None, SkipValidation] = None
    transport: Annotated[Transport | None, SkipValidation] = None

    def model_post_init(self, __context: Any) -> None:
        # Its credentials are secrets this process may see echoed (a tool result, an error).
        from agentd import known_secrets, redact

        redact.current().remember(
            self.api_token,
            known_secrets.url_password(self.url),
            *known_secrets.header_secrets(self.headers),
            *known_secrets.header_secrets(self.env or {}),
        )  # not pinned: a per-loop server's (the configured ones are, at start)

    @model_validator(mode="after")
    def _exactly_one_location(self) -> McpServerConfig:
        given = [key for key in _WHERE if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(
                f"MCP server {self.name!r} needs exactly one of url/command/toolset/transport"
                f" (got {', '.join(given) or 'none'})"
            )
        if self.command is not None and not self.command:
            raise ValueError(f"MCP server {self.name!r}: command must be a non-empty argv list")
        for key in ("toolset", "transport"):
            obj = getattr(self, key)
            if obj is not None and not callable(getattr(obj, "deliver", None)):
                raise ValueError(f"MCP server {self.name!r}: {key} has no deliver() method")
        if self.session == "process" and self.url is None:
            raise ValueError(
                f"MCP server {self.name!r}: session = 'process' is for url (HTTP) servers only"
            )
        if self.prefix is not None and not self.prefix:
            raise ValueError(f"MCP server {self.name!r}: prefix must not be empty")
        return self

    @property
    def transport_kind(self) -> str:
        if self.url is not None:
            return "http"
        if self.command is not None:
            return "stdio"
        if self.toolset is not None:
            return "local"
        return str(getattr(self.transport, "kind", "custom"))

    @classmethod
    def parse(cls, entry: dict[str, Any]) -> McpServerConfig:
        """Validate a raw entry, raising ConfigError that names the offending key."""
        try:
            return cls.model_validate(entry)
        except ValidationError as exc:
            name = entry.get("name", "?") if isinstance(entry, dict) else "?"
            problems = []
            for err in exc.errors():
                loc = ".".join(str(part) for part in err["loc"]) or "entry"
                if err["type"] == "extra_forbidden":
                    problems.append(f"unknown key {loc!r}")
                else:
                    problems.append(f"{loc}: {err['msg']}")
            raise ConfigError(f"mcps entry {name!r}: " + "; ".join(problems)) from exc

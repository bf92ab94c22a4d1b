"""Where agentd's data lives and how its API is served: the database and API settings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import platformdirs
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("agentd", appauthor=False))


class ServerSettings(BaseSettings):
    """The database and API settings (part of `Settings`, which sets their env prefix)."""

    # --- database
    database_url: str | None = Field(
        None, description="PostgreSQL URL. Unset: an embedded server in data_dir."
    )
    database_direct_url: str | None = Field(
        None,
        description="Direct (unpooled) URL for LISTEN and the heartbeat connection, "
        "when database_url points at a transaction-mode pooler.",
    )
    data_dir: Path = Field(default_factory=_default_data_dir, description="Embedded data dir.")
    database_wait: float = Field(
        30.0,
        ge=0,
        description="Seconds to wait at startup for the database to accept connections "
        "(retried with back-off; containers start in any order). 0: try once.",
    )
    db_pool_min: int = Field(1, ge=0, description="Minimum pooled connections.")
    db_pool_max: int = Field(10, ge=1, description="Maximum pooled connections.")
    db_statement_cache_size: int | None = Field(
        None,
        ge=0,
        description="Prepared statements cached per pooled connection. Unset: 100 with a "
        "direct database_url, 0 when database_direct_url is set (database_url is then a "
        "transaction-mode pooler, where PgBouncer < 1.21 cannot keep named statements). "
        "The cache saves a round trip and a re-plan per query; a statement reading `*` is "
        "cached only outside a transaction, where asyncpg re-prepares it by itself after a "
        "migration adds a column.",
    )

    # --- API
    api_token: SecretStr | None = Field(
        None, description="Bearer token for the API. Unset: `agentd up` generates one."
    )
    read_tokens: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description='Extra tokens that may only read: a JSON list (`["t1", "t2"]`) or '
        "comma-separated (`t1,t2`).",
    )
    operator_tokens: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='More operator tokens, each with a name: a JSON object (`{"alice": '
        '"t1", "ci": "t2"}`). A decision taken with one records its name (`api:alice`, or '
        "`admin:alice` in the admin UI); the `api_token` is `operator`.",
    )
    host: str = Field("127.0.0.1", description="API bind address.")
    port: int = Field(8080, ge=0, le=65535, description="API port.")
    metrics_public: bool = Field(False, description="Serve /metrics without a token.")
    metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="`agentd worker`: serve /metrics, /healthz and /readyz on this port "
        "(on `host`). 0: off.",
    )
    trace_excluded_paths: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["/healthz", "/readyz", "/metrics"],
        description="Request paths (exact, comma-separated) that make no HTTP server spans, "
        "whatever instruments the app (opentelemetry-instrument's FastAPI/ASGI "
        "instrumentation included): probes and scrapes would be most of a trace backend's "
        "spans. Empty: trace every request.",
    )
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest request body.")
    max_header_bytes: int = Field(
        32_768,
        ge=1024,
        description="Largest request head (request line and headers, in bytes); a longer "
        "one is answered 431 and its connection closed, unread.",
    )
    max_headers: int = Field(100, ge=8, description="Most header fields in a request; more: 431.")
    max_url_bytes: int = Field(
        8192, ge=256, description="Longest request URL (path and query, in bytes); longer: 414."
    )
    max_state_bytes: int = Field(
        262_144,
        ge=1024,
        description="Largest loop state (UTF-8 bytes of its JSON), at start and after a PATCH "
        "/state; larger: 413 state-too-large, nothing written.",
    )
    max_streams_per_token: int = Field(
        100,
        ge=1,
        description="Streams (GET /v1/loops/{id}/stream, GET /v1/events as SSE) one token "
        "may hold open in one API process; one more is answered 429 with Retry-After.",
    )
    max_tool_result_bytes: int = Field(
        262_144,
        ge=1024,
        description="Longer tool results (UTF-8 bytes) are cut, with a marker, before they "
        "enter the transcript.",
    )

    @field_validator("read_tokens", mode="before")
    @classmethod
    def _split_tokens(cls, v: object) -> object:
        if not isinstance(v, str):
            return v
        text = v.strip()
        if text.startswith("["):  # the documented form; `["tok"]` must never be the token
            import json

            try:
                tokens = json.loads(text)
            except ValueError:
                raise ValueError("read_tokens starts with [ but is not a JSON list") from None
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                raise ValueError("read_tokens must be a JSON list of strings")
            return [t.strip() for t in tokens if t.strip()]
        return [t.strip() for t in text.split(",") if t.strip()]

    @field_validator("operator_tokens")
    @classmethod
    def _named_tokens(cls, v: dict[str, SecretStr]) -> dict[str, SecretStr]:
        import re

        for name, token in v.items():
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}", name):
                raise ValueError(
                    f"operator_tokens: {name!r} is not a name (letters, digits, _ . @ -)"
                )
            if name in ("operator", "reader"):
                raise ValueError(f"operator_tokens: {name!r} is reserved")
            if len(token.get_secret_value()) < 16:
                raise ValueError(f"operator_tokens: the token of {name!r} is shorter than 16")
        return v

    @field_validator("trace_excluded_paths", mode="before")
    @classmethod
    def _split_paths(cls, v: object) -> object:
        if isinstance(v, str):
            return [p.strip() for p in v.split(",") if p.strip()]
        return v

    @field_validator("trace_excluded_paths")
    @classmethod
    def _absolute_paths(cls, v: list[str]) -> list[str]:
        bad = [p for p in v if not p.startswith("/")]
        if bad:
            raise ValueError(f"paths must start with /: {bad}")
        return v

    def statement_cache_size(self) -> int:
        """The pool's prepared-statement cache: explicit, else off behind a pooler."""
        if self.db_statement_cache_size is not None:
            return self.db_statement_cache_size
        return 0 if self.database_direct_url else 100

"""Settings: every tunable, from `AGENTD_*` env vars and an optional TOML file.

Precedence: explicit arguments > environment > TOML file (`--config` / `AGENTD_CONFIG`)
> defaults. The TOML file may also hold `[agents.*]`, `[mcp_servers.*]` and
`[schedules.*]` tables; those are kept raw here and validated by their owners.
`[providers.*]` tables (fleet-wide provider limits, docs/limits.md) and `[prices.*]` tables
(model prices, docs/configuration.md) are validated here.
"""

from __future__ import annotations

import os
import tomllib
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from agentd.errors import ConfigError
from agentd.event_names import WEBHOOK_EVENTS
from agentd.states import JobQueue

QUEUES = tuple(q.value for q in JobQueue)


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("agentd", appauthor=False))


class ProviderLimitsConfig(BaseModel):
    """A `[providers.NAME]` table: limits every agent calling this provider key shares.

    Matches a provider by `base_url` (and `model`, when given); the key it limits is that
    base_url + model + the api token's fingerprint, so two tokens get two budgets.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(min_length=1)
    model: str | None = None  # None: every model served at base_url
    max_concurrency: int | None = Field(None, ge=1)
    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)


class PriceConfig(BaseModel):
    """A `[prices."MODEL"]` (or `[agents.NAME.prices]`) table: USD per million tokens.

    `cached_input` defaults to `input`, `reasoning` to `output`. Write prices as TOML
    strings ("0.075") or numbers; either is kept as an exact decimal.
    """

    model_config = ConfigDict(extra="forbid")

    input: Decimal = Field(ge=0, allow_inf_nan=False)
    output: Decimal = Field(ge=0, allow_inf_nan=False)
    cached_input: Decimal | None = Field(None, ge=0, allow_inf_nan=False)
    reasoning: Decimal | None = Field(None, ge=0, allow_inf_nan=False)


class WebhookConfig(BaseModel):
    """A `[[webhooks]]` entry: where to POST which events, signed per Standard Webhooks.

    The signing secret (`whsec_<base64>`; several separated by spaces while rotating) is
    read from the env var `secret_env` names by the workers that deliver; never stored.
    """

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://\S+$")
    events: list[str] = Field(min_length=1)
    secret_env: str = Field(min_length=1)
    #: Standard Webhooks recommends 15 to 30 s per attempt.
    timeout: float = Field(default=15.0, gt=0, le=300)
    max_attempts: int = Field(default=10, ge=1, le=100)
    retry_base_delay: float = Field(default=5.0, gt=0)
    retry_max_delay: float = Field(default=3600.0, gt=0)

    @field_validator("events")
    @classmethod
    def _known_events(cls, v: list[str]) -> list[str]:
        unknown = [e for e in v if e != "*" and e not in WEBHOOK_EVENTS]
        if unknown:
            known = [str(e) for e in WEBHOOK_EVENTS]
            raise ValueError(f"unknown webhook event(s) {unknown}; known: {known}")
        return v


class Settings(BaseSettings):
    """All agentd settings. Durations are seconds unless said otherwise."""

    model_config = SettingsConfigDict(
        env_prefix="AGENTD_", extra="forbid", validate_default=True, env_nested_delimiter="__"
    )

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
        "The cache saves a round trip and a re-plan per query; only statements outside a "
        "transaction (the worker's claims and finalizes) are cached, which asyncpg "
        "re-prepares by itself after a migration changes a table.",
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

    # --- worker
    max_tool_calls_per_turn: int = Field(
        128,
        ge=1,
        description="Most tool calls one model answer may ask for (an agent's "
        "max_tool_calls_per_turn overrides it); more fails the loop, nothing run.",
    )
    max_child_depth: int = Field(
        5,
        ge=0,
        le=64,
        description="How deep child loops (agents as tools) may nest: a root loop is depth "
        "0; a call that would start a deeper child gets an error result instead.",
    )
    llm_concurrency: int = Field(64, ge=1, description="LLM turns in flight per process.")
    tool_concurrency: int = Field(32, ge=1, description="Tool calls in flight per process.")
    queues: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(QUEUES), description="Queues to run."
    )
    poll_interval: float = Field(1.0, gt=0, description="Claim poll fallback when no NOTIFY.")
    chaining: bool = Field(
        True,
        description="A worker hands work it makes due to itself, skipping the queue and its "
        "claim, as far as it has free slots: an LLM turn's tool calls (leased in the turn's "
        "finalize) and the turn after a tool call's result (claimed in the tool call's "
        "finish). A crash is healed as for any claimed job. Off: everything is queued.",
    )
    heartbeat_interval: float = Field(
        10.0, gt=0, description="Lease renewal and worker heartbeat tick."
    )
    liveness_interval: float = Field(
        1.0, gt=0, description="Dead-worker fast path check (reclaims a killed worker's work)."
    )
    reaper_interval: float = Field(60.0, gt=0, description="Full reaper sweep interval.")
    janitor_interval: float = Field(86_400.0, gt=0, description="Retention janitor interval.")
    scheduler_interval: float = Field(
        1.0, gt=0, description="How often maintenance workers fire due schedules."
    )
    shutdown_grace: float = Field(
        30.0, ge=0, description="On SIGTERM, how long in-flight turns may finish."
    )
    stream_flush_interval: float = Field(
        0.25, gt=0, description="How often a streaming partial is saved and published."
    )

    # --- reference tunables
    lease_margin: float = Field(60.0, description="Added to read_timeout to size an LLM lease.")
    queued_reap_threshold: float = Field(300.0, gt=0, description="Re-enqueue loops queued longer.")
    default_read_timeout: float = Field(600.0, gt=0, description="LLM inactivity timeout.")
    default_idle_timeout: float = Field(
        60.0,
        gt=0,
        description="A streamed LLM answer that completes no event for this long (bytes "
        "trickling in do not count) fails the attempt.",
    )
    default_tool_timeout: float = Field(600.0, gt=0, description="Ceiling for tool leases.")
    mcp_task_poll_interval: float = Field(
        5.0, gt=0, description="Seconds between MCP task polls when the server suggests none."
    )
    mcp_task_max_duration: float = Field(
        86400.0, gt=0, description="An MCP task still running after this long is given up."
    )
    mcp_discovery_retries: int = Field(
        3,
        ge=0,
        description="When a turn cannot reach its MCP servers (refused, 5xx, garbled answer), "
        "retries inside the turn before it is deferred. 0: defer at once. A timeout is not "
        "retried inside the turn.",
    )
    mcp_discovery_retry_delay: float = Field(
        0.25,
        ge=0,
        description="Wait before the first in-turn retry of MCP discovery; doubles each retry "
        "(±20% jitter).",
    )
    mcp_discovery_defer_delay: float = Field(
        5.0,
        gt=0,
        description="Then the turn is handed back (no worker slot held) for this long; doubles "
        "with each consecutive deferral (±20% jitter), up to mcp_discovery_defer_max. The "
        "same deferral applies to a model endpoint that cannot be connected to after "
        "llm_retries re-sends.",
    )
    mcp_discovery_defer_max: float = Field(
        60.0,
        gt=0,
        description="Longest single deferral of a turn whose MCP servers (or model endpoint) "
        "are down.",
    )
    mcp_discovery_give_up_after: float = Field(
        300.0,
        gt=0,
        description="A loop whose MCP discovery, or connection to its model endpoint, keeps "
        "failing this long (from its first deferral) fails, naming the server or URL and the "
        "last error.",
    )
    mcp_session_end_grace: float = Field(
        60.0,
        ge=0,
        description="Seconds a loop stays completed, failed or stopped before agentd ends its "
        "HTTP MCP sessions with DELETE (checked every reaper_interval); a loop continued "
        "later opens new ones.",
    )
    lease_leak_grace: float = Field(300.0, description="Past max_duration, a lease is dropped.")
    default_max_duration: float = Field(7200.0, gt=0, description="Max seconds for one turn.")
    llm_retries: int = Field(2, ge=0, description="Re-sends beyond the first attempt.")
    llm_retry_base_delay: float = Field(1.0, ge=0, description="Backoff base: base * 2**(n-1).")
    llm_retry_max_delay: float = Field(60.0, ge=0, description="Cap on any retry wait.")
    llm_retry_statuses: Annotated[list[int], NoDecode] = Field(
        default_factory=lambda: [408, 409, 429, 500, 502, 503, 504],
        description="HTTP statuses that are re-sent.",
    )
    event_retention: timedelta | None = Field(None, description="Prune events older. Unset: keep.")
    mcp_inbound_session_retention: timedelta | None = Field(
        None, description="Prune inbound MCP sessions created earlier. Unset: keep."
    )
    wire_log_retention: timedelta | None = Field(
        timedelta(days=30),
        description="Prune wire logs (llm.request, mcp.* events and their stored bodies) "
        "older; messages and other events are kept. `off`: keep. At least PT2H.",
    )
    idempotency_key_retention: timedelta = Field(
        timedelta(hours=24),
        gt=timedelta(0),
        description="How long an Idempotency-Key of POST /v1/loops answers with its loop; "
        "the janitor deletes older keys.",
    )
    webhook_delivery_retention: timedelta | None = Field(
        timedelta(days=7),
        description="Prune finished webhook deliveries (delivered, or failed for good) last "
        "touched earlier; pending ones stay. `off`: keep.",
    )
    janitor_batch_size: int = Field(1000, ge=1, description="Rows deleted per batch.")

    # --- provider limits (docs/limits.md)
    provider_rate_window: float = Field(
        60.0, gt=0, description="Window of the rpm/tpm provider limits (a minute)."
    )
    provider_retry_interval: float = Field(
        1.0, gt=0, description="A turn over a provider's max_concurrency retries after this."
    )
    provider_backoff_max: float = Field(
        3600.0, gt=0, description="Longest provider Retry-After honored fleet-wide."
    )

    # --- logs
    log_format: Literal["auto", "json", "console"] = Field("auto", description="Log format.")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Level.")

    # --- process
    event_loop: Literal["auto", "asyncio", "uvloop"] = Field(
        "auto",
        description="Event loop of the CLI's processes; auto: uvloop when installed (it is "
        "with the default install on Linux), else asyncio's own.",
    )

    # --- raw sections of the config file, validated by their owners
    config: Path | None = Field(None, description="TOML config file (also --config).")
    agents: dict[str, dict[str, Any]] = Field(default_factory=dict, description="[agents.*]")
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="[mcp_servers.*]"
    )
    schedules: dict[str, dict[str, Any]] = Field(default_factory=dict, description="[schedules.*]")
    providers: dict[str, ProviderLimitsConfig] = Field(
        default_factory=dict, description="[providers.*]"
    )
    prices: dict[str, PriceConfig] = Field(
        default_factory=dict, description="[prices.*]: model prices over the built-in table"
    )
    # None: the file names no webhooks, so this process leaves the fleet's endpoints as they
    # are (a worker started without the config must not disable production's endpoints);
    # a list, even `webhooks = []`, is the authority the endpoint table is made to match.
    webhooks: list[WebhookConfig] | None = Field(None, description="[[webhooks]]")

    @field_validator("lease_margin", "lease_leak_grace")
    @classmethod
    def _positive(cls, v: float, info: ValidationInfo) -> float:
        if v <= 0:
            raise ValueError(f"{info.field_name} must be > 0 (got {v})")
        return v

    @field_validator("wire_log_retention", "webhook_delivery_retention", mode="before")
    @classmethod
    def _off(cls, v: object) -> object:
        return None if isinstance(v, str) and v.strip().lower() in ("", "off", "none") else v

    @field_validator("wire_log_retention")
    @classmethod
    def _long_enough(cls, v: timedelta | None) -> timedelta | None:
        # A worker's wire-log hint lives an hour and a part stored again is touched after
        # an hour (pipeline/wire.py, sql/functions/wire_parts.sql): a shorter retention
        # could prune a part a new request is about to reference.
        if v is not None and v < timedelta(hours=2):
            raise ValueError("wire_log_retention must be at least PT2H (or off)")
        return v

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

    @field_validator("queues", mode="before")
    @classmethod
    def _split_queues(cls, v: object) -> object:
        if isinstance(v, str):
            v = [q.strip() for q in v.split(",") if q.strip()]
        return v

    @field_validator("queues")
    @classmethod
    def _known_queues(cls, v: list[str]) -> list[str]:
        unknown = [q for q in v if q not in QUEUES]
        if unknown:
            raise ValueError(f"unknown queue(s) {unknown}; known: {list(QUEUES)}")
        if not v:
            raise ValueError("at least one queue is required")
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

    @field_validator("llm_retry_statuses", mode="before")
    @classmethod
    def _split_statuses(cls, v: object) -> object:
        if isinstance(v, str):
            import json

            text = v.strip()
            if text.startswith("["):
                return json.loads(text)
            try:
                return [int(s) for s in text.split(",") if s.strip()]
            except ValueError:
                raise ValueError(f"not a comma-separated list of statuses: {v!r}") from None
        return v

    @field_validator("llm_retry_statuses")
    @classmethod
    def _valid_statuses(cls, v: list[int]) -> list[int]:
        bad = [s for s in v if not 100 <= s <= 599]
        if bad:
            raise ValueError(f"not HTTP statuses: {bad}")
        return v

    @model_validator(mode="after")
    def _coherent(self) -> Settings:
        if self.db_pool_min > self.db_pool_max:
            raise ValueError(
                f"db_pool_min ({self.db_pool_min}) must be <= db_pool_max ({self.db_pool_max})"
            )
        if self.heartbeat_interval >= self.lease_margin:
            # A lease is read_timeout + lease_margin; renewing slower than the margin
            # would let a healthy turn's lease lapse.
            raise ValueError(
                f"heartbeat_interval ({self.heartbeat_interval}) must be < lease_margin "
                f"({self.lease_margin})"
            )
        if self.llm_retry_base_delay > self.llm_retry_max_delay:
            raise ValueError("llm_retry_base_delay must be <= llm_retry_max_delay")
        urls = [w.url for w in self.webhooks or []]
        if len(set(urls)) != len(urls):
            raise ValueError("two [[webhooks]] entries have the same url")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlSource(settings_cls, init_settings))

    def statement_cache_size(self) -> int:
        """The pool's prepared-statement cache: explicit, else off behind a pooler."""
        if self.db_statement_cache_size is not None:
            return self.db_statement_cache_size
        return 0 if self.database_direct_url else 100

    def lease_seconds(self, read_timeout: float | None) -> float:
        """An LLM lease: the agent's read timeout plus the margin."""
        return (read_timeout or self.default_read_timeout) + self.lease_margin

    def redacted(self) -> dict[str, Any]:
        """Settings as a dict with secrets masked (for logs and /admin)."""
        data = self.model_dump(
            mode="json",
            exclude={"agents", "mcp_servers", "schedules", "providers", "prices", "webhooks"},
        )
        for key in ("database_url", "database_direct_url"):
            if data.get(key):
                data[key] = _mask_url(data[key])
        return data


def _mask_url(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


class _TomlSource(PydanticBaseSettingsSource):
    """Reads the TOML file named by the `config` init arg or `AGENTD_CONFIG`."""

    def __init__(self, settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._init = init

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = self._init().get("config") or os.environ.get("AGENTD_CONFIG")
        if not path:
            return {}
        p = Path(path)
        try:
            with p.open("rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {p}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p} is not valid TOML: {exc}") from exc
        data.setdefault("config", str(p))
        return data


def load_settings(config: str | Path | None = None, **overrides: Any) -> Settings:
    """Build Settings, turning validation failures into one clear ConfigError."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    try:
        if config is not None:
            overrides["config"] = Path(config)
        return Settings(**overrides)
    except SettingsError as exc:
        raise ConfigError(f"invalid settings: {exc}") from None
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "settings"
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{loc}: {msg}")
        raise ConfigError("invalid settings: " + "; ".join(lines)) from None


def reference_markdown() -> str:
    """The configuration table of docs/configuration.md, generated so it cannot drift."""
    rows = ["| env var | default | meaning |", "|---|---|---|"]
    skip = {"agents", "mcp_servers", "schedules", "providers", "prices", "webhooks", "config"}
    for name, field in Settings.model_fields.items():
        if name in skip:
            continue
        default: object = field.default
        if field.default_factory is not None:
            default = (
                "(per user)" if name == "data_dir" else field.get_default(call_default_factory=True)
            )
        if default is None:
            shown = "unset"
        elif isinstance(default, list):
            shown = ",".join(str(x) for x in default) or "(none)"
        elif isinstance(default, timedelta):  # ISO 8601, as the variable is written
            whole_days = default.days and not default.seconds and not default.microseconds
            shown = f"P{default.days}D" if whole_days else f"PT{default.total_seconds():g}S"
        else:
            shown = str(default)
        rows.append(f"| `AGENTD_{name.upper()}` | `{shown}` | {field.description or ''} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")

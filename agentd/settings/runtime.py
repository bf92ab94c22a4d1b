"""How agentd runs its work: the worker's and the reference tunables, provider limits,
logs and the process."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import NoDecode

from agentd.settings.server import ServerSettings
from agentd.states import JobQueue

QUEUES = tuple(q.value for q in JobQueue)


class RuntimeSettings(ServerSettings):
    """The worker's, the reference's and the process's tunables (part of `Settings`)."""

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
    stream_publish_interval: float = Field(
        0.1,
        gt=0,
        description="How often the partial of a stream someone is watching is saved and "
        "published (bounds observer lag; never slower than stream_flush_interval).",
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

    def lease_seconds(self, read_timeout: float | None) -> float:
        """An LLM lease: the agent's read timeout plus the margin."""
        return (read_timeout or self.default_read_timeout) + self.lease_margin

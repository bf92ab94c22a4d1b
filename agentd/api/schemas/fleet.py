"""Fleet-wide reports: provider limits and back-offs, concurrency keys, costs."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from agentd.api.schemas.base import Money, Tokens


class ProviderOut(BaseModel):
    id: str = Field(description="Hash of base_url, model and key_fingerprint.")
    base_url: str
    model: str
    key_fingerprint: str = Field(description="sha256 of the api token, first 12 hex digits.")
    blocked_until: datetime | None = Field(
        None, description="Back-off set by a 429/503 Retry-After; turns wait until then."
    )
    blocked_seconds: float
    last_status: int | None
    last_throttled_at: datetime | None
    max_concurrency: int | None
    rpm: int | None
    tpm: int | None
    in_flight: int
    window_requests: int = Field(description="Requests admitted in the current rate window.")
    window_tokens: int = Field(description="Tokens charged in the current rate window.")
    throttled: int = Field(description="429/503 answers with Retry-After seen.")
    admitted: int
    deferred: int


class ConcurrencyKeyOut(BaseModel):
    key: str
    running: int = Field(description="Loops holding a slot under the key.")
    updated_at: datetime


class ProvidersOut(BaseModel):
    providers: list[ProviderOut]
    concurrency_keys: list[ConcurrencyKeyOut] = Field(
        description="The busiest concurrency keys (at most 100)."
    )
    window_seconds: float


class ModelCostOut(BaseModel):
    model: str | None = Field(description="The model the calls asked for.")
    cost: Money | None = Field(description="USD (a decimal string); null: no known price.")
    turns: int = Field(description="Model calls (turns and compaction summaries).")
    unpriced_turns: int


class AgentCostOut(BaseModel):
    agent: str
    cost: Money | None = Field(
        description="USD over the window's loops (a decimal string); null when none of "
        "their turns had a price."
    )
    loops: int
    unpriced_turns: int = Field(description="Turns on models with no known price.")
    tokens: Tokens
    models: list[ModelCostOut]


class CostsOut(BaseModel):
    since: datetime
    until: datetime
    agents: list[AgentCostOut] = Field(description="Loops created in [since, until), by agent.")

"""The validated tables of the config file: `[providers.*]`, `[prices.*]`, `[[webhooks]]`."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentd.event_names import WEBHOOK_EVENTS


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

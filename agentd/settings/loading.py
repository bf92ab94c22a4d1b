"""`Settings`, the whole model, its sources (arguments, environment, the TOML file), and
`load_settings`."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agentd.errors import ConfigError
from agentd.settings.runtime import RuntimeSettings
from agentd.settings.tables import PriceConfig, ProviderLimitsConfig, WebhookConfig


class Settings(RuntimeSettings):
    """All agentd settings. Durations are seconds unless said otherwise."""

    model_config = SettingsConfigDict(
        env_prefix="AGENTD_", extra="forbid", validate_default=True, env_nested_delimiter="__"
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

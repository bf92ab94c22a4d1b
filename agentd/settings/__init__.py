"""Settings: every tunable, from `AGENTD_*` env vars and an optional TOML file.

Precedence: explicit arguments > environment > TOML file (`--config` / `AGENTD_CONFIG`)
> defaults. The TOML file may also hold `[agents.*]`, `[mcp_servers.*]` and
`[schedules.*]` tables; those are kept raw here and validated by their owners.
`[providers.*]` tables (fleet-wide provider limits, docs/limits.md) and `[prices.*]` tables
(model prices, docs/configuration.md) are validated here.
"""

from __future__ import annotations

from agentd.settings.loading import Settings, load_settings
from agentd.settings.reference import reference_markdown
from agentd.settings.runtime import QUEUES
from agentd.settings.tables import PriceConfig, ProviderLimitsConfig, WebhookConfig

__all__ = [
    "QUEUES",
    "PriceConfig",
    "ProviderLimitsConfig",
    "Settings",
    "WebhookConfig",
    "load_settings",
    "reference_markdown",
]

"""What the HTTP app needs from the process that serves it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentd import redact
from agentd.db.pool import Pool
from agentd.engine.lifecycle import Lifecycle
from agentd.observability.metrics import Telemetry
from agentd.registry import AgentRegistry
from agentd.settings import Settings

if TYPE_CHECKING:
    from agentd.engine.service import Engine


@dataclass
class AppState:
    settings: Settings
    pool: Pool
    registry: AgentRegistry
    lifecycle: Lifecycle
    database_url: str  # direct URL for LISTEN (live streams)
    api_token: str  # the operator token (never logged)
    engine: Engine | None = None  # set when this process also runs a worker
    telemetry: Telemetry | None = None  # unset: the engine's, else the app makes one
    # The secrets the app masks: its engine's, else the process's (redact.installed), else
    # its own. Installed for every request (api/app.py).
    secrets: redact.KnownSecrets = field(default_factory=redact.current)
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        *,
        settings: Settings,
        pool: Pool,
        registry: AgentRegistry,
        database_url: str,
        api_token: str,
        engine: Engine | None = None,
    ) -> AppState:
        """The usual wiring: the engine's lifecycle and telemetry when this process runs one,
        else a lifecycle of its own."""
        return cls(
            settings=settings,
            pool=pool,
            registry=registry,
            lifecycle=engine.lifecycle if engine else Lifecycle(pool, registry, settings),
            database_url=database_url,
            api_token=api_token,
            engine=engine,
            telemetry=engine.telemetry if engine else None,
            secrets=engine.secrets if engine else redact.current(),
        )

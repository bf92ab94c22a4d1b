"""The fleet-wide calls of the clients (the event feed, costs, provider limits, webhooks,
schedules, agents and their upgrades), as mixins of AsyncClient and Client."""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from agentd.client import routes
from agentd.client.models import (
    AgentUpgradeOut,
    CostsOut,
    DeliveryOut,
    EndpointOut,
    EventOut,
    Page,
    ProvidersOut,
    ScheduleOut,
)
from agentd.client.routes import LoopId

R = TypeVar("R")


class _AsyncFleet:
    """AsyncClient's fleet-wide calls; `_do` is AsyncClient's."""

    if TYPE_CHECKING:

        async def _do(self, call: routes.Call[R]) -> R: ...

    async def feed(
        self,
        *,
        after: int | None = None,
        loop: LoopId | None = None,
        agent: str | None = None,
        types: builtins.list[str] | None = None,
        limit: int = 100,
    ) -> Page[EventOut]:
        """The fleet's events (GET /v1/events), oldest first; pass `int(next_cursor)` as
        `after`."""
        return await self._do(routes.feed(after, loop, agent, types, limit))

    async def costs(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        agent: str | None = None,
    ) -> CostsOut:
        return await self._do(routes.costs(since, until, agent))

    async def providers(self) -> ProvidersOut:
        return await self._do(routes.providers())

    async def webhooks(self) -> builtins.list[EndpointOut]:
        return await self._do(routes.webhooks())

    async def webhook_deliveries(
        self, *, status: str | None = None, cursor: str | int | None = None, limit: int = 50
    ) -> Page[DeliveryOut]:
        return await self._do(routes.webhook_deliveries(status, cursor, limit))

    async def resend_delivery(self, delivery_id: int) -> DeliveryOut:
        return await self._do(routes.resend_delivery(delivery_id))

    async def create_schedule(
        self,
        name: str,
        agent: str,
        message: str,
        *,
        cron: str | None = None,
        at: datetime | None = None,
        timezone: str | None = None,
        overlap: str | None = None,
        subject: str | None = None,
        state: dict[str, Any] | None = None,
        enabled: bool | None = None,
    ) -> ScheduleOut:
        spec = {
            "name": name,
            "agent": agent,
            "message": message,
            "cron": cron,
            "at": at.isoformat() if at is not None else None,
            "timezone": timezone,
            "overlap": overlap,
            "subject": subject,
            "state": state,
            "enabled": enabled,
        }
        return await self._do(routes.create_schedule(spec))

    async def schedules(self) -> builtins.list[ScheduleOut]:
        return await self._do(routes.list_schedules())

    async def get_schedule(self, name: str) -> ScheduleOut:
        return await self._do(routes.schedule("GET", name))

    async def delete_schedule(self, name: str) -> ScheduleOut:
        return await self._do(routes.schedule("DELETE", name))

    async def pause_schedule(self, name: str) -> ScheduleOut:
        return await self._do(routes.schedule("POST", name, "pause"))

    async def resume_schedule(self, name: str) -> ScheduleOut:
        return await self._do(routes.schedule("POST", name, "resume"))

    async def agents(self) -> builtins.list[dict[str, Any]]:
        return await self._do(routes.agents())

    async def upgrade_agent(
        self,
        agent: str,
        *,
        from_version: str | None = None,
        to_version: str | None = None,
        dry_run: bool = False,
    ) -> AgentUpgradeOut:
        """Upgrade a page of the agent's loops (`remaining`: call again)."""
        return await self._do(routes.upgrade_agent(agent, from_version, to_version, dry_run))


class _SyncFleet:
    """Client's fleet-wide calls (the same as AsyncClient's, blocking); `_do` is Client's."""

    if TYPE_CHECKING:

        def _do(self, call: routes.Call[R]) -> R: ...

    def feed(
        self,
        *,
        after: int | None = None,
        loop: LoopId | None = None,
        agent: str | None = None,
        types: builtins.list[str] | None = None,
        limit: int = 100,
    ) -> Page[EventOut]:
        """The fleet's events (GET /v1/events), oldest first; pass `int(next_cursor)` as
        `after`."""
        return self._do(routes.feed(after, loop, agent, types, limit))

    def costs(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        agent: str | None = None,
    ) -> CostsOut:
        return self._do(routes.costs(since, until, agent))

    def providers(self) -> ProvidersOut:
        return self._do(routes.providers())

    def webhooks(self) -> builtins.list[EndpointOut]:
        return self._do(routes.webhooks())

    def webhook_deliveries(
        self, *, status: str | None = None, cursor: str | int | None = None, limit: int = 50
    ) -> Page[DeliveryOut]:
        return self._do(routes.webhook_deliveries(status, cursor, limit))

    def resend_delivery(self, delivery_id: int) -> DeliveryOut:
        return self._do(routes.resend_delivery(delivery_id))

    def create_schedule(
        self,
        name: str,
        agent: str,
        message: str,
        *,
        cron: str | None = None,
        at: datetime | None = None,
        timezone: str | None = None,
        overlap: str | None = None,
        subject: str | None = None,
        state: dict[str, Any] | None = None,
        enabled: bool | None = None,
    ) -> ScheduleOut:
        spec = {
            "name": name,
            "agent": agent,
            "message": message,
            "cron": cron,
            "at": at.isoformat() if at is not None else None,
            "timezone": timezone,
            "overlap": overlap,
            "subject": subject,
            "state": state,
            "enabled": enabled,
        }
        return self._do(routes.create_schedule(spec))

    def schedules(self) -> builtins.list[ScheduleOut]:
        return self._do(routes.list_schedules())

    def get_schedule(self, name: str) -> ScheduleOut:
        return self._do(routes.schedule("GET", name))

    def delete_schedule(self, name: str) -> ScheduleOut:
        return self._do(routes.schedule("DELETE", name))

    def pause_schedule(self, name: str) -> ScheduleOut:
        return self._do(routes.schedule("POST", name, "pause"))

    def resume_schedule(self, name: str) -> ScheduleOut:
        return self._do(routes.schedule("POST", name, "resume"))

    def agents(self) -> builtins.list[dict[str, Any]]:
        return self._do(routes.agents())

    def upgrade_agent(
        self,
        agent: str,
        *,
        from_version: str | None = None,
        to_version: str | None = None,
        dry_run: bool = False,
    ) -> AgentUpgradeOut:
        """Upgrade a page of the agent's loops (`remaining`: call again)."""
        return self._do(routes.upgrade_agent(agent, from_version, to_version, dry_run))

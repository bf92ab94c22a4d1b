"""Engine: assembles one process's worker, waker, lease renewer, reaper and janitor.

Guarantee: every background service runs in one TaskGroup; if one dies the process stops
loudly rather than running half a daemon. Shutdown is two-phase: stop claiming, let
in-flight work finish within the grace period, hand the rest back, then stop the
heartbeat, listener and maintenance.
Called by: the CLI (`agentd up`, `agentd worker`), tests, the demo (each hands it the
pipeline stacks to run).
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentd import known_secrets, logs, redact
from agentd.db.listener import Listener
from agentd.db.pool import Pool, connection
from agentd.engine import versions
from agentd.engine.janitor import Janitor
from agentd.engine.lease_renewer import LeaseRenewer
from agentd.engine.lifecycle import Lifecycle
from agentd.engine.mcp_session_ender import McpSessionEnder
from agentd.engine.reaper import Reaper
from agentd.engine.runtime import Runtime
from agentd.engine.scheduler import Scheduler
from agentd.engine.stacks import StackSource
from agentd.engine.stream_flusher import StreamFlusher
from agentd.engine.wakes import Wakes
from agentd.engine.webhooks import WebhookDeliverer
from agentd.engine.worker import Worker
from agentd.llm.http_pool import pooled_client
from agentd.mcp.hub import McpHub
from agentd.observability.metrics import Telemetry
from agentd.registry import AgentRegistry
from agentd.settings import QUEUES, Settings
from agentd.store import workers

if TYPE_CHECKING:
    from agentd.llm.client import LLMClient

log = logs.get("agentd.engine")


async def unconsumed_queues(pool: Pool) -> list[str]:
    """Queues that no live worker in the fleet consumes (work there would stall)."""
    async with connection(pool) as conn:
        rows = await workers.list_(conn)
    consumed = {q for r in rows if not r["stopping"] for q in r["queues"]}
    return [q for q in QUEUES if q not in consumed]


@dataclass
class Engine:
    settings: Settings
    pool: Pool
    registry: AgentRegistry
    url: str  # direct URL for the heartbeat and LISTEN connections
    # The LLM and tool stacks the worker runs: agentd.pipeline.stacks.Stacks() unless the
    # caller builds its own (the engine does not import the pipeline).
    stacks: StackSource
    queues: list[str] = field(default_factory=lambda: list(QUEUES))
    llm: LLMClient | None = None
    telemetry: Telemetry = field(default_factory=Telemetry)
    # The secrets this engine masks (redact.KnownSecrets): the process's when it installed
    # one (the CLI does, shared with its API), else the engine's own.
    secrets: redact.KnownSecrets = field(default_factory=redact.current)

    def __post_init__(self) -> None:
        from agentd.llm.client import LLMClient, RetryPolicy

        # The configured secrets (API tokens, provider keys, MCP credentials, webhook
        # secrets) are ones this process may see echoed: events, logs, transcripts.
        known_secrets.remember_configured(self.secrets, self.settings, self.registry)

        self.llm_client = self.llm or LLMClient(
            policy=RetryPolicy.from_settings(self.settings),
            default_read_timeout=self.settings.default_read_timeout,
            default_idle_timeout=self.settings.default_idle_timeout,
        )
        worker_id, hostname = uuid.uuid4(), socket.gethostname()
        self.flusher = StreamFlusher(
            self.pool,
            self.settings.stream_flush_interval,
            publish_interval=self.settings.stream_publish_interval,
            secrets=self.secrets,
        )
        self.renewer = LeaseRenewer(
            self.settings,
            self.url,
            worker_id=worker_id,
            hostname=hostname,
            queues=self.queues,
            agent_versions=self.registry.version_ids(),
        )
        self.runtime = Runtime(
            settings=self.settings,
            pool=self.pool,
            registry=self.registry,
            llm=self.llm_client,
            worker_id=worker_id,
            hostname=hostname,
            consumes=frozenset(self.queues),
            secrets=self.secrets,
            renewer=self.renewer,
            flusher=self.flusher,
            # Per-request timeouts come from each server's entry (asyncio.timeout).
            mcp=McpHub(http=pooled_client(max_connections=500, max_keepalive=100, timeout=None)),
            wakes=Wakes(),
            telemetry=self.telemetry,
        )
        self.worker = Worker(self.runtime, self.queues, self.stacks)
        self.listener = Listener(
            self.url,
            ["agentd_jobs", "agentd_control"],
            self._on_notify,
            on_reconnect=self.worker.wake_all,
        )
        self.reaper = Reaper(self.settings, self.pool, own_worker=self.runtime.worker_id)
        self.janitor = Janitor(self.settings, self.pool)
        self.session_ender = McpSessionEnder(
            self.settings, self.pool, self.registry, hub=self.runtime.mcp
        )
        self.lifecycle = Lifecycle(self.pool, self.registry, self.settings)
        self.scheduler = Scheduler(self.settings, self.pool, self.lifecycle)
        self.webhooks = WebhookDeliverer(self.settings, self.pool, worker_id=self.runtime.worker_id)
        maintains = "maintenance" in self.queues
        self.telemetry.watch(
            pool=self.pool,
            renewer=self.renewer,
            worker=self.worker,
            reaper=self.reaper if maintains else None,
        )
        self.started = asyncio.Event()

    @property
    def worker_id(self) -> object:
        return self.runtime.worker_id

    def _on_notify(self, channel: str, payload: str) -> None:
        if channel == "agentd_jobs" and payload == "webhook":
            self.webhooks.wake()
        elif channel == "agentd_jobs":
            self.worker.wake(payload)
        elif channel == "agentd_control":
            self.worker.on_control(payload)

    async def run(self, stop: asyncio.Event) -> None:
        # Every task of the engine (turns, tool calls, services) redacts with its secrets.
        with redact.installed(self.secrets):
            await self._run(stop)

    async def _run(self, stop: asyncio.Event) -> None:
        if "maintenance" in self.queues and self.settings.schedules:
            await self.scheduler.sync_config(self.settings.schedules)
        if "maintenance" in self.queues:
            await self.webhooks.sync_config()  # a missing secret stops the start here
        # Before the worker row says which versions it runs (what claims and
        # waiting_for_version go by): every version it names is recorded.
        await versions.record(self.pool, self.registry)
        await self.renewer.connect()
        missing = await unconsumed_queues(self.pool)
        if missing:
            log.warning(
                "fleet.queues_unconsumed",
                queues=missing,
                hint="start a worker with --queues including these, or their work will wait",
            )
        log.info(
            "engine.started",
            worker=str(self.runtime.worker_id),
            queues=self.queues,
            llm_concurrency=self.settings.llm_concurrency,
            tool_concurrency=self.settings.tool_concurrency,
        )
        services_stop = asyncio.Event()
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.renewer.run(services_stop), name="lease-renewer")
                tg.create_task(self.listener.run(services_stop), name="listener")
                tg.create_task(self.flusher.run(services_stop), name="stream-flusher")
                if "maintenance" in self.queues:
                    tg.create_task(self.reaper.run_liveness(services_stop), name="liveness")
                    tg.create_task(self.reaper.run(services_stop), name="reaper")
                    tg.create_task(self.janitor.run(services_stop), name="janitor")
                    tg.create_task(self.session_ender.run(services_stop), name="mcp-sessions")
                    tg.create_task(self.scheduler.run(services_stop), name="scheduler")
                    tg.create_task(self.webhooks.run(services_stop), name="webhooks")
                self.started.set()

                async def work() -> None:
                    try:
                        await self.worker.run(stop)
                    finally:
                        await self.renewer.set_stopping()
                        services_stop.set()

                tg.create_task(work(), name="worker")
        finally:
            await self.renewer.close()
            if self.runtime.mcp.http is not None:  # always set above; the field is optional
                await self.runtime.mcp.http.aclose()
            if self.llm is None:
                await self.llm_client.aclose()
            log.info("engine.stopped", worker=str(self.runtime.worker_id))

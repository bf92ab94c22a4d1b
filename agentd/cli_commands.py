"""What each `agentd` command does once its settings are loaded (`agentd.cli` parses the
command line, configures logs and maps errors to exit codes)."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import signal
import sys
from typing import TYPE_CHECKING, Any

from agentd import logs
from agentd.api.head_limits import HeadLimits
from agentd.api.serve import HttpServer
from agentd.db.startup import open_database, ready_url
from agentd.errors import ConfigError
from agentd.settings import QUEUES, Settings

if TYPE_CHECKING:
    from agentd.db.pool import Pool
    from agentd.registry import AgentRegistry

log = logs.get("agentd.cli")

#: Exit codes (documented in docs/operations.md); a supervisor can tell them apart.
EXIT_OK = 0
EXIT_FAILURE = 1  # any other agentd error (the message says which)
EXIT_CONFIG = 2  # bad usage, invalid settings or config file, malformed database URL
EXIT_DB_UNREACHABLE = 3  # still unreachable after AGENTD_DATABASE_WAIT seconds
EXIT_DB_MISSING = 4  # the database does not exist, or rejected the role or password
EXIT_ADDRESS_IN_USE = 5  # the API (or probe) port is taken
EXIT_INTERRUPTED = 130


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _registry(settings: Settings) -> AgentRegistry:
    from agentd.registry import build_registry

    registry = build_registry(settings.agents)
    registry.warn_missing_keys()
    registry.warn_unknown_agent_tools()
    return registry


def _token(settings: Settings) -> str:
    if settings.api_token is not None:
        return settings.api_token.get_secret_value()
    token = secrets.token_urlsafe(32)
    # Printed once, to stdout, never through the log pipeline.
    print(f"agentd: no AGENTD_API_TOKEN set; generated one for this run: {token}", flush=True)
    return token


def _http_server(settings: Settings, port: int, **setting: str) -> HttpServer:
    """A bound listening socket with the configured head limits and untraced paths
    (`setting=`: the setting a taken port is blamed on, HttpServer's default else)."""
    return HttpServer(
        settings.host,
        port,
        limits=HeadLimits.from_settings(settings),
        untraced=settings.trace_excluded_paths,
        **setting,
    )


# --- commands -----------------------------------------------------------------------------


async def up(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.app import process_app
    from agentd.engine.service import Engine
    from agentd.pipeline.stacks import Stacks

    stop = _stop_on_signals()
    registry = _registry(settings)
    server = _http_server(settings, settings.port)
    try:
        async with open_database(settings, migrate_first=True, stop=stop) as (pool, url):
            token = _token(settings)
            engine = Engine(
                settings=settings,
                pool=pool,
                registry=registry,
                url=url,
                stacks=Stacks(),
                queues=list(QUEUES),
            )
            app = process_app(settings, pool, url, registry, engine, token)
            log.info("agentd.up", host=settings.host, port=server.port, agents=registry.names())
            async with asyncio.TaskGroup() as tg:
                tg.create_task(engine.run(stop), name="engine")
                tg.create_task(server.serve(app, stop), name="http")
    finally:
        server.close()
    return 0


async def worker(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.engine.service import Engine
    from agentd.pipeline.stacks import Stacks

    stop = _stop_on_signals()
    registry = _registry(settings)
    # Bound first, as the API's port is: a taken probe port is one clear error at once.
    probe = (
        _http_server(settings, settings.metrics_port, setting="AGENTD_METRICS_PORT")
        if settings.metrics_port
        else None
    )
    try:
        async with open_database(settings, migrate_first=False, stop=stop) as (pool, url):
            await _require_current(pool)
            engine = Engine(
                settings=settings,
                pool=pool,
                registry=registry,
                url=url,
                stacks=Stacks(),
                queues=list(settings.queues),
            )
            if probe is None:
                await engine.run(stop)
                return 0
            from agentd.api import probes

            log.info("agentd.metrics_port", host=settings.host, port=probe.port)
            served = asyncio.Event()  # probes answer until the drain is over, not just begun

            async def work() -> None:
                try:
                    await engine.run(stop)
                finally:
                    served.set()

            async with asyncio.TaskGroup() as tg:
                tg.create_task(work(), name="engine")
                tg.create_task(probe.serve(probes.create_app(engine), served), name="probes")
    finally:
        if probe is not None:
            probe.close()
    return 0


async def api(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.app import process_app

    stop = _stop_on_signals()
    registry = _registry(settings)
    server = _http_server(settings, settings.port)
    try:
        async with open_database(settings, migrate_first=False, stop=stop) as (pool, url):
            await _require_current(pool)
            from agentd.engine import versions

            await versions.record(pool, registry)  # the versions its starts record
            token = _token(settings)
            app = process_app(settings, pool, url, registry, None, token)
            await server.serve(app, stop)
    finally:
        server.close()
    return 0


async def upgrade(settings: Settings, args: argparse.Namespace) -> int:
    import json

    from agentd.client import AsyncClient
    from agentd.client.errors import ApiError, ClientError

    if (args.loop_id is None) == (args.agent is None):
        print("agentd upgrade: give a LOOP_ID or --agent NAME (not both)", file=sys.stderr)
        return EXIT_CONFIG
    if args.from_version and args.agent is None:
        print("agentd upgrade: --from goes with --agent", file=sys.stderr)
        return EXIT_CONFIG
    url = args.url or f"http://{settings.host}:{settings.port}"
    token = settings.api_token.get_secret_value() if settings.api_token else None
    try:
        async with AsyncClient(url, token) as client:
            if args.agent is not None:
                out: Any = await client.upgrade_agent(
                    args.agent,
                    from_version=args.from_version,
                    to_version=args.to_version,
                    dry_run=args.dry_run,
                )
            else:
                out = await client.upgrade(
                    args.loop_id, to_version=args.to_version, dry_run=args.dry_run
                )
    except ApiError as exc:
        print(f"agentd upgrade: {exc}", file=sys.stderr)
        print(json.dumps(exc.body, indent=2))
        return EXIT_FAILURE
    except ClientError as exc:
        print(f"agentd upgrade: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(json.dumps(out.model_dump(mode="json"), indent=2))
    return EXIT_OK


async def _require_current(pool: Pool) -> None:
    from agentd.db import migrate
    from agentd.db.pool import connection

    async with connection(pool) as conn:
        pending = await migrate.pending(conn)
        functions = await migrate.pending_functions(conn)
    if pending or functions:
        names = ", ".join(
            [f"{m.version:04d}_{m.name}" for m in pending]
            + [f"functions/{f.name}" for f in functions]
        )
        raise ConfigError(f"database has pending migrations ({names}); run `agentd migrate`")


async def migrate(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.db import migrate as migrations
    from agentd.db import pool as dbpool

    async with ready_url(settings) as url:
        conn = await dbpool.connect(settings.database_direct_url or url)
        try:
            applied = await migrations.apply(conn)
        finally:
            await conn.close()
    print(
        f"agentd: applied {len(applied)} migration(s)"
        + (": " + ", ".join(f"{m.version:04d}_{m.name}" for m in applied) if applied else "")
    )
    return 0


async def reap(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.engine.reaper import Reaper

    async with open_database(settings, migrate_first=False) as (pool, _):
        report = await Reaper(settings, pool).sweep_once()
    print(
        "agentd: reaper sweep: "
        + (", ".join(f"{k}={v}" for k, v in report.as_log().items()) or "nothing to heal")
    )
    return 0


async def prune(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.engine.janitor import Janitor

    async with open_database(settings, migrate_first=False) as (pool, _):
        report = await Janitor(settings, pool).prune_once()
    print(
        f"agentd: pruned {report.events} event(s), {report.inbound_sessions} inbound MCP "
        f"session(s), {report.idempotency_keys} expired idempotency key(s), "
        f"{report.wire_logs} wire log(s), {report.wire_parts} wire part(s)"
    )
    return 0


async def demo(settings: Settings, args: argparse.Namespace) -> int:
    from agentd import demo

    return await demo.run(settings, args)

"""The `agentd` command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from agentd import __about__, logs
from agentd.errors import AgentdError, ConfigError
from agentd.settings import QUEUES, Settings, load_settings

log = logs.get("agentd.cli")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentd", description="Durable AI agent loops on PostgreSQL.")
    p.add_argument("--version", action="version", version=f"agentd {__about__.__version__}")
    p.add_argument("--config", help="TOML config file (also AGENTD_CONFIG)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("up", help="migrate, then serve the API and run a worker with maintenance")
    w = sub.add_parser("worker", help="run a worker only (scale out: many against one database)")
    w.add_argument("--queues", help=f"comma-separated subset of {','.join(QUEUES)}")
    sub.add_parser("api", help="serve the control plane only")
    sub.add_parser("migrate", help="apply pending migrations and exit")
    sub.add_parser("reap", help="run one reaper sweep and exit")
    sub.add_parser("prune", help="run one retention sweep and exit")
    d = sub.add_parser("demo", help="zero-setup demo: embedded Postgres, fake LLM, example agent")
    d.add_argument("--llm-base-url", help="run against a real OpenAI-compatible endpoint")
    d.add_argument("--model", help="model name for --llm-base-url")
    d.add_argument("--no-crash", action="store_true", help="skip the worker-kill demonstration")
    d.add_argument(
        "--exit",
        action="store_true",
        help="exit when the loop finishes (default in a terminal: keep the API and "
        "admin UI up until Ctrl-C)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if not args.command:
        _parser().print_help()
        sys.exit(2)
    try:
        overrides: dict[str, Any] = {}
        if getattr(args, "queues", None):
            overrides["queues"] = args.queues
        settings = load_settings(args.config, **overrides)
    except (ConfigError, ValueError) as exc:
        print(f"agentd: {exc}", file=sys.stderr)
        sys.exit(2)
    logs.configure(settings.log_format, settings.log_level)
    from agentd.observability import tracing

    tracing.setup_from_env()  # only when OTEL_TRACES_EXPORTER / an OTLP endpoint is set
    commands: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]] = {
        "up": _up,
        "worker": _worker,
        "api": _api,
        "migrate": _migrate,
        "reap": _reap,
        "prune": _prune,
        "demo": _demo,
    }
    try:
        code = asyncio.run(commands[args.command](settings, args))
    except ConfigError as exc:
        print(f"agentd: {exc}", file=sys.stderr)
        code = 2
    except AgentdError as exc:
        print(f"agentd: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


# --- plumbing ---------------------------------------------------------------------------


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


@contextlib.asynccontextmanager
async def _database(settings: Settings, *, migrate_first: bool) -> AsyncIterator[tuple[Any, str]]:
    from agentd.db import embedded
    from agentd.db import migrate as migrations
    from agentd.db import pool as dbpool

    async with embedded.database_url(settings.database_url, settings.data_dir) as url:
        direct = settings.database_direct_url or url
        if migrate_first:
            conn = await dbpool.connect(direct, application_name="agentd-migrate")
            try:
                await migrations.apply(conn)
            finally:
                await conn.close()
        pool = await dbpool.create_pool(
            url,
            min_size=settings.db_pool_min,
            max_size=settings.db_pool_max,
            statement_cache_size=settings.statement_cache_size(),
        )
        try:
            yield pool, direct
        finally:
            await pool.close()


def _registry(settings: Settings) -> Any:
    from agentd.registry import build_registry

    return build_registry(settings.agents)


def _token(settings: Settings) -> str:
    if settings.api_token is not None:
        return settings.api_token.get_secret_value()
    token = secrets.token_urlsafe(32)
    # Printed once, to stdout, never through the log pipeline.
    print(f"agentd: no AGENTD_API_TOKEN set; generated one for this run: {token}", flush=True)
    return token


class _Server:
    """uvicorn in our event loop, with our signal handling (not uvicorn's)."""

    def __init__(self, app: Any, settings: Settings) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # type: ignore[no-untyped-def,override]
                yield

        config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
            lifespan="off",
            limit_concurrency=None,
            timeout_graceful_shutdown=5,
        )
        self.server = Server(config)

    async def serve(self, stop: asyncio.Event) -> None:
        task = asyncio.create_task(self.server.serve())
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        self.server.should_exit = True
        stopper.cancel()
        await task
        if task in done and not stop.is_set():
            raise AgentdError("the HTTP server stopped unexpectedly (is the port in use?)")


def _app(settings: Settings, pool: Any, url: str, registry: Any, engine: Any, token: str) -> Any:
    from agentd.api.app import create_app
    from agentd.api.state import AppState

    state = AppState.create(
        settings=settings,
        pool=pool,
        registry=registry,
        database_url=url,
        api_token=token,
        engine=engine,
    )
    return create_app(state)


# --- commands -----------------------------------------------------------------------------


async def _up(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.engine.service import Engine

    stop = _stop_on_signals()
    registry = _registry(settings)
    token = _token(settings)
    async with _database(settings, migrate_first=True) as (pool, url):
        engine = Engine(
            settings=settings, pool=pool, registry=registry, url=url, queues=list(QUEUES)
        )
        server = _Server(_app(settings, pool, url, registry, engine, token), settings)
        log.info("agentd.up", host=settings.host, port=settings.port, agents=registry.names())
        async with asyncio.TaskGroup() as tg:
            tg.create_task(engine.run(stop), name="engine")
            tg.create_task(server.serve(stop), name="http")
    return 0


async def _worker(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.engine.service import Engine

    stop = _stop_on_signals()
    registry = _registry(settings)
    async with _database(settings, migrate_first=False) as (pool, url):
        await _require_current(pool)
        engine = Engine(
            settings=settings, pool=pool, registry=registry, url=url, queues=list(settings.queues)
        )
        if not settings.metrics_port:
            await engine.run(stop)
            return 0
        from agentd.observability import probes

        server = probes.ProbeServer(
            probes.create_app(engine), host=settings.host, port=settings.metrics_port
        )
        log.info("agentd.metrics_port", host=settings.host, port=settings.metrics_port)
        served = asyncio.Event()  # probes answer until the drain is over, not just begun

        async def work() -> None:
            try:
                await engine.run(stop)
            finally:
                served.set()

        async with asyncio.TaskGroup() as tg:
            tg.create_task(work(), name="engine")
            tg.create_task(server.run(served), name="probe-server")
    return 0


async def _api(settings: Settings, args: argparse.Namespace) -> int:
    stop = _stop_on_signals()
    registry = _registry(settings)
    token = _token(settings)
    async with _database(settings, migrate_first=False) as (pool, url):
        await _require_current(pool)
        await _Server(_app(settings, pool, url, registry, None, token), settings).serve(stop)
    return 0


async def _require_current(pool: Any) -> None:
    from agentd.db import migrate
    from agentd.db.pool import connection

    async with connection(pool) as conn:
        pending = await migrate.pending(conn)
    if pending:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in pending)
        raise ConfigError(f"database has pending migrations ({names}); run `agentd migrate`")


async def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.db import embedded
    from agentd.db import migrate as migrations
    from agentd.db import pool as dbpool

    async with embedded.database_url(settings.database_url, settings.data_dir) as url:
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


async def _reap(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.engine.reaper import Reaper

    async with _database(settings, migrate_first=False) as (pool, _):
        report = await Reaper(settings, pool).sweep_once()
    print(
        "agentd: reaper sweep: "
        + (", ".join(f"{k}={v}" for k, v in report.as_log().items()) or "nothing to heal")
    )
    return 0


async def _prune(settings: Settings, args: argparse.Namespace) -> int:
    from agentd.engine.janitor import Janitor

    async with _database(settings, migrate_first=False) as (pool, _):
        report = await Janitor(settings, pool).prune_once()
    print(
        f"agentd: pruned {report.events} event(s), {report.inbound_sessions} inbound MCP session(s)"
    )
    return 0


async def _demo(settings: Settings, args: argparse.Namespace) -> int:
    from agentd import demo

    return await demo.run(settings, args)

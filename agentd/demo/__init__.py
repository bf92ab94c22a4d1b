"""`agentd demo`: a durable agent loop from nothing, in under a minute.

Starts an embedded PostgreSQL of its own (in `<data_dir>/demo`, apart from the one `agentd
up` uses; or AGENTD_DATABASE_URL when set), a scripted fake model (or a real
OpenAI-compatible endpoint with --llm-base-url/--model), the API, and a worker process;
runs a travel-planning agent with parallel tool calls and one approval; kills the worker
with SIGKILL in the middle of a tool call and starts another, which picks the work up;
prints the transcript as it streams, and the times it measured. Its scratch directory (the
worker's config and log) is removed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.settings import Settings
from agentd.states import ApprovalStatus, LoopStatus, ToolCallStatus

if TYPE_CHECKING:
    from agentd.db.pool import Pool
    from agentd.store.models import Loop, Message, ToolCall

AGENT = "trip"
TASK = (
    "Plan and book a 3-night trip from Berlin to Lisbon on 2026-12-12, cheapest flight and hotel."
)


def _free_port(host: str, preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind((host, preferred))
            return preferred
        except OSError:
            s.bind((host, 0))
            return int(s.getsockname()[1])


class _Out:
    """The transcript printer: streamed text inline, tool activity on its own lines."""

    def __init__(self) -> None:
        self.inline = False

    def line(self, text: str = "") -> None:
        if self.inline:
            sys.stdout.write("\n")
            self.inline = False
        print(text, flush=True)

    def stream(self, text: str) -> None:
        if not self.inline:
            sys.stdout.write("assistant > ")
            self.inline = True
        sys.stdout.write(text)
        sys.stdout.flush()


async def _start_worker(url: str, config: Path, log: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "AGENTD_DATABASE_URL": url,
        "AGENTD_CONFIG": str(config),
        "AGENTD_QUEUES": "llm,tool",
        "AGENTD_HEARTBEAT_INTERVAL": "1",
        "AGENTD_LOG_FORMAT": "json",
        "AGENTD_LOG_LEVEL": "info",
    }
    env.pop("AGENTD_API_TOKEN", None)
    with log.open("ab") as f:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentd",
            "worker",
            env=env,
            stdout=f,
            stderr=f,
            stdin=asyncio.subprocess.DEVNULL,
        )


async def _registered(pool: Pool, *, within: float) -> None:
    from agentd.db.pool import connection
    from agentd.store import workers

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        async with connection(pool) as conn:
            if await workers.list_(conn):
                return
        await asyncio.sleep(0.1)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from agentd import logs
    from agentd.api.head_limits import HeadLimits
    from agentd.api.serve import HttpServer
    from agentd.app import process_app
    from agentd.client import AsyncClient
    from agentd.db.listener import Listener
    from agentd.db.pool import connection
    from agentd.demo.agent import TripAgent
    from agentd.engine.service import Engine
    from agentd.pipeline.stacks import Stacks
    from agentd.registry import build_registry
    from agentd.store import loops, messages, tool_calls
    from agentd.testing.fake_llm import FakeLLM

    logs.configure(settings.log_format, "warning")
    out = _Out()
    started = time.monotonic()
    settings = settings.model_copy(
        update={
            "liveness_interval": 0.5,
            "log_level": "warning",
            "port": _free_port(settings.host, settings.port),
        }
    )
    out.line("agentd demo: a durable agent loop on PostgreSQL")
    real = bool(args.llm_base_url)
    if real and not args.model:
        out.line("agentd demo: --llm-base-url needs --model too")
        return 2
    fake = None if real else FakeLLM()
    registry = build_registry(settings.agents)
    if AGENT not in registry:
        registry.register(AGENT, TripAgent)
    token = (
        settings.api_token.get_secret_value() if settings.api_token else secrets.token_urlsafe(18)
    )
    # Its own embedded server: the demo's loops never mix with `agentd up`'s database.
    settings = settings.model_copy(update={"data_dir": settings.data_dir / "demo"})
    t_db = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agentd-demo-")))
        config = workdir / "agents.toml"
        config.write_text(f'[agents.{AGENT}]\nclass = "agentd.demo.agent:TripAgent"\n')
        worker_log = workdir / "worker.log"
        pool, url = await _open_database(stack, settings)
        where = (
            "embedded PostgreSQL in " + str(settings.data_dir)
            if not settings.database_url
            else "AGENTD_DATABASE_URL"
        )
        out.line(f"  database  {where} (ready in {time.monotonic() - t_db:.1f}s)")
        if fake is not None:
            from agentd.demo.script import script

            await stack.enter_async_context(fake)
            script(fake)
            state: dict[str, Any] = {"llm": fake.base_url}
            out.line(f"  model     built-in scripted fake LLM at {fake.base_url}")
        else:
            state = {"llm": args.llm_base_url, "model": args.model, "api_key_env": "OPENAI_API_KEY"}
            out.line(f"  model     {args.model} at {args.llm_base_url} (key from OPENAI_API_KEY)")
        worker = await _start_worker(url, config, worker_log)
        await _registered(pool, within=20)
        stop = asyncio.Event()
        engine = Engine(
            settings=settings,
            pool=pool,
            registry=registry,
            url=url,
            stacks=Stacks(),  # a maintenance-only engine runs none, but every engine gets them
            queues=["maintenance"],
        )
        server = HttpServer(
            settings.host,
            settings.port,
            limits=HeadLimits.from_settings(settings),
            untraced=settings.trace_excluded_paths,
        )
        stack.callback(server.close)
        app = process_app(settings, pool, url, registry, engine, token)
        tasks = [
            asyncio.create_task(engine.run(stop)),
            asyncio.create_task(server.serve(app, stop)),
        ]
        base = f"http://{settings.host}:{settings.port}"
        # The demo decides approvals as an application would: over the API, with the client.
        client = await stack.enter_async_context(AsyncClient(base, token))
        out.line(f"  API       {base}/v1   token: {token}")
        out.line(f"  admin UI  {base}/admin   (log in with the token)")
        out.line(f"  worker    pid {worker.pid}")
        out.line()

        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def on_notify(channel: str, payload: str) -> None:
            with contextlib.suppress(ValueError):
                events.put_nowait(json.loads(payload))

        listener = Listener(url, ["agentd_stream"], on_notify)
        tasks.append(asyncio.create_task(listener.run(stop)))
        await asyncio.wait_for(listener.connected.wait(), 10)

        loop = await engine.lifecycle.start(
            agent=AGENT, message=TASK, state=state, observe=True, subject="demo-user"
        )
        out.line(f"user > {TASK}")
        loop_started = time.monotonic()
        killed_at: float | None = None
        recovered_at: float | None = None
        approvals = 0
        shown: set[int] = set()
        streamed: dict[int, str] = {}
        result = 1

        async def sync() -> tuple[Loop, list[ToolCall], list[Message]]:
            """Print what committed since last time; kill/approve at the right moments."""
            nonlocal worker, killed_at, recovered_at, approvals
            async with connection(pool) as conn:
                row = await loops.get(conn, loop_id=loop.id)
                calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
                msgs = await messages.list_(conn, loop_id=loop.id)
            assert row is not None  # the demo's own loop: nothing deletes it
            for m in msgs:
                if m.id in shown or m.role == "user":
                    continue
                shown.add(m.id)
                if m.role == "assistant":
                    rest = (m.content or "")[len(streamed.get(m.id, "")) :]
                    if rest:
                        out.stream(rest)
                    out.line()
                    for c in (x for x in calls if x.message_id == m.id):
                        out.line(f"  -> {c.name}({json.dumps(c.arguments)})")
                elif m.role == "tool":
                    answered = next((x for x in calls if x.id == m.tool_call_id), None)
                    text = (m.content or "").replace("\n", " ")
                    out.line(f"  <- {answered.name if answered else 'tool'}: {text[:110]}")
            slow = [c for c in calls if c.name == "find_hotels"]
            if (
                killed_at is None
                and not args.no_crash
                and any(c.status == ToolCallStatus.RUNNING for c in slow)
            ):
                worker.send_signal(signal.SIGKILL)
                await worker.wait()
                killed_at = time.monotonic()
                out.line(
                    f"  !! killed worker pid {worker.pid} with SIGKILL while "
                    "find_hotels was running"
                )
                worker = await _start_worker(url, config, worker_log)
                out.line(f"  .. started a new worker, pid {worker.pid}")
            if killed_at and recovered_at is None and any(c.attempts > 1 for c in slow):
                recovered_at = time.monotonic()
                out.line(
                    f"  .. find_hotels was reclaimed {recovered_at - killed_at:.1f}s "
                    "after the kill; it runs again with the same idempotency key"
                )
            for c in calls:
                if c.approval_status == ApprovalStatus.PENDING:
                    out.line(
                        f"  ?? {c.name} waits for a person's approval; the demo "
                        f"approves it with agentd.client (POST /v1/tool-calls/{c.id}/approve)"
                    )
                    await client.approve(c.id, reason="approved by the demo")
                    approvals += 1
            return row, calls, msgs

        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    ev = await asyncio.wait_for(events.get(), 0.2)
                    if ev.get("loop_id") == str(loop.id) and ev.get("type") == "delta":
                        mid = int(ev.get("message_id", 0))
                        if mid not in streamed:
                            await sync()  # earlier results print before the new turn
                        streamed[mid] = streamed.get(mid, "") + ev.get("delta", "")
                        out.stream(ev.get("delta", ""))
                    continue
                row, calls, msgs = await sync()
                if row.status == LoopStatus.COMPLETED:
                    out.line()
                    n_msgs = len([m for m in msgs if m.role == "assistant"])
                    out.line(
                        f"done in {time.monotonic() - started:.1f}s (the loop itself "
                        f"{time.monotonic() - loop_started:.1f}s): {row.step_count} "
                        f"turns, {n_msgs} assistant messages, {len(calls)} tool calls, "
                        f"{approvals} approval, worker killed "
                        f"{'once' if killed_at else 'never'}; every turn and tool call "
                        "has exactly one canonical record."
                    )
                    out.line(
                        f"inspect it: curl -H 'Authorization: Bearer {token}' "
                        f"{base}/v1/loops/{loop.id}/messages"
                    )
                    result = 0
                    break
                if row.status in (LoopStatus.FAILED, LoopStatus.PAUSED, LoopStatus.STOPPED):
                    out.line(f"loop {row.status}: {row.error_message or row.status_reason}")
                    break
            else:
                out.line("agentd demo: the loop did not finish within 120s")
            if result != 0:  # the scratch directory goes away: show why first
                tail = worker_log.read_text(errors="replace").splitlines()[-20:]
                out.line("worker log (last lines):\n" + "\n".join(tail))
            if result == 0 and sys.stdin.isatty() and not getattr(args, "exit", False):
                out.line(
                    f"the API and admin UI stay up at {base}/admin (token above); "
                    "press Ctrl-C to stop"
                )
                interrupted = asyncio.Event()
                loop_ = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop_.add_signal_handler(sig, interrupted.set)
                await interrupted.wait()
        finally:
            out.line()
            with contextlib.suppress(ProcessLookupError):
                worker.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.wait(), 15)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
    return result


async def _open_database(stack: contextlib.AsyncExitStack, settings: Settings) -> tuple[Pool, str]:
    from agentd.db.migrate import MigrationChanged
    from agentd.db.startup import open_database

    try:
        return await stack.enter_async_context(open_database(settings, migrate_first=True))
    except MigrationChanged:
        if settings.database_url:
            raise
        # The demo's embedded database is its own scratch space: one made by an earlier
        # development build (its migrations since squashed or edited) is made anew.
        await asyncio.to_thread(shutil.rmtree, settings.data_dir, True)
        return await stack.enter_async_context(open_database(settings, migrate_first=True))

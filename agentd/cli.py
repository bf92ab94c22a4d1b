"""The `agentd` command: its parser, settings and logs, and exit codes for known errors
(what each command does is in `agentd.cli_commands`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from agentd import __about__, cli_commands, event_loop, logs, redact
from agentd.cli_commands import (
    EXIT_ADDRESS_IN_USE,
    EXIT_CONFIG,
    EXIT_DB_MISSING,
    EXIT_DB_UNREACHABLE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,  # noqa: F401 (re-exported: the documented exit codes live beside the commands)
)
from agentd.db.startup import Interrupted
from agentd.errors import (
    AddressInUse,
    AgentdError,
    ConfigError,
    DatabaseError,
    DatabaseMissing,
    DatabaseUnavailable,
)
from agentd.settings import QUEUES, Settings, load_settings

_SERVE_EPILOG = (
    "The database is awaited at startup with back-off for up to AGENTD_DATABASE_WAIT "
    "seconds (default 30). Exit codes: 0 ok, 1 failure, 2 configuration, 3 database "
    "unreachable, 4 database missing or login rejected, 5 port in use."
)


def _parser() -> argparse.ArgumentParser:
    # --config is accepted before and after the subcommand (`agentd up --config x.toml`);
    # SUPPRESS keeps a subcommand's absent option from overwriting the global one.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="TOML config file with [agents.*] etc. (also AGENTD_CONFIG)",
    )
    p = argparse.ArgumentParser(
        prog="agentd",
        description="Durable AI agent loops on PostgreSQL.",
        parents=[common],
        epilog="Run `agentd COMMAND --help` for a command's options. "
        "Settings come from AGENTD_* environment variables (docs/configuration.md).",
    )
    p.add_argument("--version", action="version", version=f"agentd {__about__.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def command(
        name: str, summary: str, description: str, *, serve: bool = False, config: bool = True
    ) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=summary,
            description=description,
            parents=[common] if config else [],
            epilog=_SERVE_EPILOG if serve else None,
        )

    up = command(
        "up",
        "migrate, then serve the API and run a worker with maintenance",
        "Apply pending migrations, then serve the REST API, admin UI and metrics and run a "
        "worker for every queue (llm, tool, maintenance) in one process. Without "
        "AGENTD_DATABASE_URL an embedded PostgreSQL is started in AGENTD_DATA_DIR.",
        serve=True,
    )
    w = command(
        "worker",
        "run a worker only (scale out: many against one database)",
        "Claim and run turns from the database; start as many as you like against one "
        "database. Refuses to start while migrations are pending.",
        serve=True,
    )
    w.add_argument("--queues", help=f"comma-separated subset of {','.join(QUEUES)} (default: all)")
    api = command(
        "api",
        "serve the control plane only",
        "Serve the REST API, admin UI and metrics without running turns. Refuses to start "
        "while migrations are pending.",
        serve=True,
    )
    for cmd in (up, api):
        cmd.add_argument("--host", help="bind address (AGENTD_HOST, default 127.0.0.1)")
        cmd.add_argument("--port", type=int, help="port (AGENTD_PORT, default 8080)")
    for cmd in (up, w, api):
        cmd.add_argument(
            "--database-wait",
            type=float,
            metavar="SECONDS",
            help="wait this long for the database at startup (AGENTD_DATABASE_WAIT, default 30)",
        )
    command(
        "migrate",
        "apply pending migrations and exit",
        "Apply pending migrations and exit. Safe to run from many processes at once.",
        serve=True,
    )
    command(
        "reap",
        "run one reaper sweep and exit",
        "Heal stuck loops once (expired leases, stalled tool calls, lost jobs) and exit.",
        serve=True,
    )
    command(
        "prune",
        "run one retention sweep and exit",
        "Delete events and inbound MCP sessions older than their retention, then exit.",
        serve=True,
    )
    d = command(
        "demo",
        "zero-setup demo: embedded Postgres, fake LLM, example agent",
        "Run a travel-planning agent end to end on an embedded PostgreSQL of its own "
        "(a temporary directory, removed afterwards) and a scripted fake model: parallel "
        "tool calls, an approval, a worker killed with SIGKILL mid-tool and recovered.",
    )
    d.add_argument("--llm-base-url", help="run against a real OpenAI-compatible endpoint")
    d.add_argument("--model", help="model name for --llm-base-url")
    d.add_argument("--no-crash", action="store_true", help="skip the worker-kill demonstration")
    d.add_argument(
        "--exit",
        action="store_true",
        help="exit when the loop finishes (default in a terminal: keep the API and "
        "admin UI up until Ctrl-C)",
    )
    u = command(
        "upgrade",
        "move a loop (or an agent's loops) to another agent version",
        "Ask the API to move a loop, or with --agent every loop of an agent, to another "
        "agent version (default: the newest) at its next turn boundary, and print the "
        "result as JSON. --dry-run prints what would change (tools renamed or removed, "
        "approval rules, limits) and changes nothing. The API is --url (default "
        "http://AGENTD_HOST:AGENTD_PORT) with the token AGENTD_API_TOKEN. Exit 1 when the "
        "API refuses (e.g. 409 upgrade-would-orphan: a pending call's tool would be renamed "
        "or gone).",
    )
    u.add_argument("loop_id", nargs="?", help="the loop to upgrade (or use --agent)")
    u.add_argument("--agent", help="upgrade this agent's loops instead of one loop")
    u.add_argument("--from", dest="from_version", help="with --agent: only loops on this version")
    u.add_argument("--to", dest="to_version", help="target version (default: the newest)")
    u.add_argument("--dry-run", action="store_true", help="show the diff, change nothing")
    u.add_argument("--url", help="the API's base URL")
    f = command(
        "fake-llm",
        "serve the offline scripted model (no API key needed)",
        "Serve a scripted fake LLM that speaks the open_ai, anthropic and gemini dialects, "
        "streaming or not, with no API key. Point an agent's base_url at it. Default "
        "script: a user message is echoed back ('echo: ...'); a message '/call NAME {json}' "
        "gets a call of tool NAME with those arguments, and the tool's result is reported.",
        config=False,
    )
    f.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    f.add_argument("--port", type=int, default=9000, help="port (default 9000; 0: any free)")
    f.add_argument("--rules", metavar="FILE", help="JSON list of rules instead of the default")
    return p


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        sys.exit(EXIT_CONFIG)
    if args.command == "fake-llm":  # needs no settings, database or logs
        from agentd.testing import fake_llm

        sys.exit(fake_llm.serve_command(args))
    try:
        overrides: dict[str, Any] = {}
        for key in ("queues", "host", "port", "database_wait"):
            if getattr(args, key, None) is not None:
                overrides[key] = getattr(args, key)
        settings = load_settings(getattr(args, "config", None), **overrides)
    except (ConfigError, ValueError) as exc:
        print(f"agentd: {exc}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
    # The process's known secrets: its engine and API mask them (they take the installed
    # set as theirs), and so does every log line, from any thread.
    secret_set = redact.KnownSecrets()
    logs.configure(settings.log_format, settings.log_level, secrets=secret_set)
    from agentd.observability import tracing

    tracing.setup_from_env()  # only when OTEL_TRACES_EXPORTER / an OTLP endpoint is set
    commands: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]] = {
        "up": cli_commands.up,
        "worker": cli_commands.worker,
        "api": cli_commands.api,
        "migrate": cli_commands.migrate,
        "reap": cli_commands.reap,
        "prune": cli_commands.prune,
        "demo": cli_commands.demo,
        "upgrade": cli_commands.upgrade,
    }
    try:
        with (
            redact.installed(secret_set),
            asyncio.Runner(loop_factory=event_loop.factory(settings.event_loop)) as runner,
        ):
            code = runner.run(commands[args.command](settings, args))
    except (KeyboardInterrupt, Interrupted):
        code = EXIT_INTERRUPTED
    except BaseException as exc:
        known = _operational(exc)
        if known is None:
            raise  # a bug: keep the traceback
        print(f"agentd: {known}", file=sys.stderr)
        code = _exit_code(known)
    sys.exit(code)


def _operational(exc: BaseException) -> AgentdError | None:
    """The agentd error behind `exc`, looking inside task groups; None for anything else."""
    if isinstance(exc, DatabaseError) and not isinstance(exc, DatabaseUnavailable):
        return None  # a statement the database refused: a bug, keep the traceback
    if isinstance(exc, AgentdError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _operational(inner)
            if found is not None:
                return found
    return None


def _exit_code(exc: AgentdError) -> int:
    if isinstance(exc, DatabaseMissing):
        return EXIT_DB_MISSING
    if isinstance(exc, DatabaseUnavailable):
        return EXIT_DB_UNREACHABLE
    if isinstance(exc, AddressInUse):
        return EXIT_ADDRESS_IN_USE
    if isinstance(exc, ConfigError):
        return EXIT_CONFIG
    return EXIT_FAILURE

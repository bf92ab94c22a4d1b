"""structlog setup: console in a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, cast

import structlog
from structlog.typing import FilteringBoundLogger, Processor

from agentd import redact

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _scrubber(secrets: redact.KnownSecrets | None) -> Processor:
    def scrub(_: object, __: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
        scrubbed: dict[str, Any] = redact.scrub(event, known=secrets)
        return scrubbed

    return scrub


def configure(
    fmt: str = "auto", level: str = "info", *, secrets: redact.KnownSecrets | None = None
) -> None:
    """Configure structlog once per process, and route the standard library's logging (and
    `warnings`) through the same renderer: asyncpg, OpenTelemetry, uvicorn and asyncio
    log there, and with `json` a traceback of theirs is one JSON line like ours. Every line
    is scrubbed of patterns and of `secrets` (the process's known secrets; None: those
    installed where the line is logged, redact.installed)."""
    scrub = _scrubber(secrets)
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer: Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            scrub,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    _route_stdlib(renderer, scrub)
    if fmt == "json":  # an uncaught exception's traceback is one JSON line too
        sys.excepthook = _log_uncaught
    elif sys.excepthook is _log_uncaught:
        sys.excepthook = sys.__excepthook__


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("agentd").critical("process.crashed", exc_info=(kind, exc, tb))


class _StdlibHandler(logging.StreamHandler):
    """The root logger's handler that configure() installs (replaced, never stacked). It
    writes to whatever sys.stderr is when a record comes (a test may swap it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _route_stdlib(renderer: Processor, scrub: Processor) -> None:
    """Libraries' records (stdlib logging) rendered by structlog's ProcessorFormatter on the
    root logger, kept at warning (their info is chatter); `warnings` go there too."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_logger_name,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            scrub,
            renderer,
        ],
    )
    handler = _StdlibHandler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _StdlibHandler) or (
            # basicConfig's plain handler (an earlier configure, or a library's call)
            type(old) is logging.StreamHandler and old.stream in (sys.stderr, sys.__stderr__)
        ):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)


def get(name: str) -> FilteringBoundLogger:
    """The logger of `name`, as `configure` set it up (a filtering bound logger)."""
    return cast("FilteringBoundLogger", _Logger(name))


class _Logger:
    """A module's logger that keeps the bound logger structlog's configuration makes, and
    makes it again only when that configuration changes.

    structlog's lazy proxy (what `get_logger` returns, with `cache_logger_on_first_use`
    off so a later `configure` still applies) builds a bound logger on every call: ~4.5 us
    even for a level that is filtered out, against ~0.2 us, and the worker logs a few
    times per job."""

    __slots__ = ("_bound", "_key", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._key: tuple[object, ...] | None = None
        self._bound: Any = None

    def __getattr__(self, attr: str) -> Any:
        # structlog.get_config() hands out the configured objects themselves, so comparing
        # their identities tells a reconfiguration (structlog.configure, capture_logs, ...)
        # apart from the configuration the bound logger was made with (~0.2 us a call).
        c = structlog.get_config()
        k = self._key
        if (
            k is None
            or k[0] is not c["processors"]
            or k[1] is not c["wrapper_class"]
            or k[2] is not c["logger_factory"]
            or k[3] is not c["context_class"]
        ):
            self._bound = structlog.get_logger(self._name).bind()
            self._key = (
                c["processors"],
                c["wrapper_class"],
                c["logger_factory"],
                c["context_class"],
            )
        return getattr(self._bound, attr)

"""structlog setup: console in a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from structlog.typing import FilteringBoundLogger, Processor

from agentd import redact

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _scrub(_: object, __: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    scrubbed: dict[str, Any] = redact.scrub(event)
    return scrubbed


def configure(fmt: str = "auto", level: str = "info") -> None:
    """Configure structlog once per process."""
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
            _scrub,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # uvicorn and asyncpg use stdlib logging; keep them at warning and on stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(message)s")


def get(name: str) -> FilteringBoundLogger:
    """The logger of `name`, as `configure` set it up (a filtering bound logger)."""
    logger: FilteringBoundLogger = structlog.get_logger(name)
    return logger

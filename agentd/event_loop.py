"""The event loop the CLI's processes run on (`AGENTD_EVENT_LOOP`).

uvloop measured ~15-25% less worker CPU per job than asyncio's own loop on the B11
user-path bench (bench/README.md); agentd uses only the asyncio API, so either runs it.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from typing import Literal

Choice = Literal["auto", "asyncio", "uvloop"]


def factory(choice: Choice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A loop factory for `asyncio.Runner`; None is asyncio's default loop."""
    if choice == "asyncio" or (choice == "auto" and importlib.util.find_spec("uvloop") is None):
        return None
    import uvloop  # "uvloop" asked for and missing: the ImportError says what to install

    return uvloop.new_event_loop

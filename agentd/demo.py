"""`agentd demo`: not built yet."""

from __future__ import annotations

import argparse
import sys

from agentd.settings import Settings


async def run(settings: Settings, args: argparse.Namespace) -> int:
    print("agentd: `agentd demo` is not built yet (see the issue 'Zero-setup demo').",
          file=sys.stderr)
    return 3

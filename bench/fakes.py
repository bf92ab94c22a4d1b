"""FakeLLM in a process, plus an events log (one JSON line per request and per client
disconnect, with CLOCK_REALTIME stamps) so a benchmark in another process can time them.

    python -m bench.fakes llm --rules rules.json [--events file.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from agentd.testing.fake_llm import FakeLLM, rule_from_json
from agentd.testing.fake_llm.command import serve_forever


class LoggingFakeLLM(FakeLLM):
    def __init__(self, *a: Any, events: str | None = None, **kw: Any) -> None:
        self._fd = (
            os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if events else None
        )
        self._disc = 0
        super().__init__(*a, **kw)

    def _log(self, kind: str) -> None:
        if self._fd is not None:
            os.write(self._fd, (json.dumps({"kind": kind, "t": time.time()}) + "\n").encode())

    @property  # type: ignore[override]
    def disconnects(self) -> int:
        return self._disc

    @disconnects.setter
    def disconnects(self, v: int) -> None:
        if v > getattr(self, "_disc", 0):
            self._log("disconnect")
        self._disc = v

    async def _respond(self, conn: Any, request: Any, body: bytes) -> None:
        self._log("request")
        self.requests.clear()  # bounded memory over long runs
        await super()._respond(conn, request, body)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["llm"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--rules")
    p.add_argument("--events")
    a = p.parse_args(argv)
    rules = []
    if a.rules:
        with open(a.rules, encoding="utf-8") as f:
            rules = [rule_from_json(r) for r in json.load(f)]
    asyncio.run(serve_forever(LoggingFakeLLM(rules, port=a.port, events=a.events)))


if __name__ == "__main__":
    main(sys.argv[1:])

"""B7's model: a FakeLLM in a process that answers every request with one `echo` tool call
carrying `--bytes` of fresh random text (so the assistant message's arguments and the tool
result are each that big and never repeat: TOAST compression cannot hide a transcript
stored again and again), non-streaming, zero latency.

    python -m bench.b7_fake [--bytes 64] [--port 0]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys

from agentd.testing.fake_llm import FakeLLM, LastMessage, Reply, Rule, ToolCall
from agentd.testing.fake_llm.command import serve_forever


def reply(size: int) -> Rule:
    def build(last: LastMessage) -> Reply:
        text = secrets.token_urlsafe(max(1, size * 3 // 4))[:size]
        return Reply(content="", tool_calls=[ToolCall("echo", {"text": text})])

    return Rule(match=None, reply=build)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--bytes", type=int, default=64)
    a = p.parse_args(argv)

    class Bounded(FakeLLM):
        async def _respond(self, conn: object, request: object, body: bytes) -> None:
            self.requests.clear()  # bounded memory over a long run
            await super()._respond(conn, request, body)  # type: ignore[arg-type]

    asyncio.run(serve_forever(Bounded([reply(a.bytes)], port=a.port)))


if __name__ == "__main__":
    main(sys.argv[1:])

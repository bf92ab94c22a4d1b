"""The soak's faulty outside world: a fake LLM that answers a random fault mix, and an MCP
server whose tools record every effect with the idempotency key it carried."""

from __future__ import annotations

import asyncio
import collections
import random
import re
from dataclasses import dataclass
from typing import Any

from agentd.mcp.port import CallContext
from agentd.mcp.toolset import Toolset
from agentd.testing.fake_llm import FakeLLM, LastMessage, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer

#: The user message every soak loop starts with: "chaos <index>".
PROMPT = re.compile(r"chaos (\d+)")
#: The external `add` tool's answer carries the loop index forward to the second round.
ADD_RESULT = re.compile(r"sum=-?\d+ loop=(\d+)")


@dataclass(frozen=True)
class Effect:
    """One execution of an external tool, as the outside world saw it."""

    key: str | None
    tool: str
    arguments: dict[str, Any]


def external_toolset(effects: list[Effect]) -> Toolset:
    tools = Toolset("ext", version="1.0.0")

    @tools.tool(description="Add two integers")
    async def add(a: int, b: int, ctx: CallContext) -> str:
        effects.append(Effect(ctx.idempotency_key, "add", {"a": a, "b": b}))
        return f"sum={a + b} loop={a}"

    @tools.tool(description="Multiply two integers")
    async def mul(a: int, b: int, ctx: CallContext) -> str:
        effects.append(Effect(ctx.idempotency_key, "mul", {"a": a, "b": b}))
        return f"product={a * b}"

    return tools


def script(width: int) -> list[Rule]:
    """user "chaos i" -> `width` add calls; an external add result -> two mul calls (a second
    round); any other tool result (calc's add, mul, a tool error) -> a final answer."""

    def first(last: LastMessage) -> bool:
        return last.role == "user" and PROMPT.search(last.text) is not None

    def second(last: LastMessage) -> bool:
        return last.role == "tool" and ADD_RESULT.search(last.text) is not None

    class FirstRound(Rule):
        def matches(self, last: LastMessage) -> bool:
            if not first(last):
                return False
            i = int(PROMPT.search(last.text).group(1))  # type: ignore[union-attr]
            self.reply = Reply(
                content=f"Adding for loop {i}.",
                tool_calls=[ToolCall("add", {"a": i, "b": k}) for k in range(width)],
                chunk_size=16,
            )
            return True

    class SecondRound(Rule):
        def matches(self, last: LastMessage) -> bool:
            if not second(last):
                return False
            i = int(ADD_RESULT.search(last.text).group(1))  # type: ignore[union-attr]
            self.reply = Reply(
                content="Now multiplying.",
                tool_calls=[ToolCall("mul", {"a": i, "b": 10 + k}) for k in range(2)],
                chunk_size=16,
            )
            return True

    return [
        FirstRound(),
        SecondRound(),
        Rule(match=lambda last: last.role == "tool", reply=Reply(content="All done.")),
    ]


class ChaosLLM(FakeLLM):
    """FakeLLM answering `fault_rate` of requests with a fault drawn from a seeded RNG.

    Faults: 429 / 500 with Retry-After, a stall before the first byte, and (streaming only)
    a stall or a dropped connection mid-stream. `stall_seconds` should exceed the workers'
    read timeout so a stall is a real inactivity timeout."""

    def __init__(self, *, fault_rate: float, stall_seconds: float, seed: int, width: int) -> None:
        super().__init__(script(width))
        self.fault_rate = fault_rate
        self.stall_seconds = stall_seconds
        self.faults: collections.Counter[str] = collections.Counter()
        self._rng = random.Random(seed)

    def _pick(self, last: LastMessage) -> Reply:
        # _respond records the request and calls _pick with no await between: [-1] is ours.
        stream = bool(self.requests and self.requests[-1].stream)
        if self.fault_rate and self._rng.random() < self.fault_rate:
            kinds = ["llm_429", "llm_500", "llm_stall_first_byte"]
            if stream:
                kinds += ["llm_stall_mid_stream", "llm_drop_mid_stream"]
            kind = self._rng.choice(kinds)
            self.faults[kind] += 1
            return self._fault(kind)
        return super()._pick(last)

    def _fault(self, kind: str) -> Reply:
        if kind == "llm_429":
            return Reply(status=429, retry_after="0.2", error_body={"error": "slow down"})
        if kind == "llm_500":
            return Reply(status=500, retry_after="0.1", error_body={"error": "oops"})
        if kind == "llm_stall_first_byte":
            return Reply(content="never", delay_before_first_byte=self.stall_seconds)
        long = "x" * 200
        if kind == "llm_stall_mid_stream":
            return Reply(content=long, chunk_size=8, stall_after_chunks=3)
        return Reply(content=long, chunk_size=8, drop_after_chunks=3)


class _CountingRandom(random.Random):
    """The MCP server's RNG: counts the draws that fall under its fail rate (= faults)."""

    def __init__(self, seed: int, server: FakeMcpServer) -> None:
        super().__init__(seed)
        self.server = server
        self.hits = 0

    def random(self) -> float:
        value = super().random()
        if value < self.server.fail_rate:
            self.hits += 1
        return value


class ChaosMcp(FakeMcpServer):
    """FakeMcpServer over the recording toolset, restartable on its port."""

    def __init__(self, *, token: str, fail_rate: float, seed: int) -> None:
        self.effects: list[Effect] = []
        super().__init__(external_toolset(self.effects), token=token)
        self._random = self._rng = _CountingRandom(seed, self)
        self.fail_rate = fail_rate
        self.restarts = 0

    @property
    def failures(self) -> int:
        return self._rng.hits

    async def restart(self, down_for: float) -> None:
        await self.close()
        self.expire_sessions()  # a restarted server has forgotten its sessions
        self.restarts += 1
        await asyncio.sleep(down_for)  # the outage itself: nothing to wait on
        await self.start()

"""The shared end-to-end workload: LLM step -> parallel tool steps -> LLM step, against
FakeLLM and fake_mcp over HTTP. The same client code (agentd's LLMClient and McpClient) is
used by the bare loop (no DB, no engine) and by the DBOS workflow."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

import httpx
import mcp

from agentd.llm.client import LLMClient
from agentd.llm.http_pool import pooled_client
from agentd.llm.types import LLMRequest, Message, Provider, ToolSpec
from agentd.mcp.config import McpServerConfig
from agentd.mcp.port import CallContext
from agentd.mcp.toolbox import open_toolbox

TOOLS_PER_TURN = 2


def rules(stream: bool = False, chunk_delay: float = 0.0, chunks: int = 1) -> list[dict[str, Any]]:
    """user -> 2 tool calls (add, echo); tool result -> a final answer."""
    final: dict[str, Any] = {
        "content": "x" * (8 * chunks),
        "chunk_size": 8,
        "chunk_delay": chunk_delay,
    }
    return [
        {"match": {"role": "tool"}, "reply": final},
        {
            "match": None,
            "reply": {
                "tool_calls": [
                    {"name": "add", "arguments": {"a": 1, "b": 2}},
                    {"name": "echo", "arguments": {"text": "hi"}},
                ][:TOOLS_PER_TURN]
            },
        },
    ]


class BareLoop:
    """One agent loop with no database: the HTTP work agentd's pipelines do per loop."""

    def __init__(self, llm_url: str, mcp_url: str, llm: LLMClient | None = None) -> None:
        self.steps = 0  # LLM steps + tool steps finished (counted as they finish)
        self.provider = Provider(base_url=llm_url, model="fake-model")
        self.config = McpServerConfig(name="fake", url=mcp_url)
        self.llm = llm or LLMClient()
        # One pooled HTTP client for every MCP call, as an agentd engine has (service.py):
        # without it each call opens a connection, which measures connects, not the loop.
        self.mcp_http = pooled_client(max_connections=500, max_keepalive=100, timeout=None)

    async def aclose(self) -> None:
        await self.llm.aclose()
        await self.mcp_http.aclose()

    async def discover(self) -> tuple[Any, list[ToolSpec]]:
        box = await open_toolbox([self.config], CallContext(), http=self.mcp_http)
        specs = [
            ToolSpec(
                name=t.name,
                description=t.description or "",
                input_schema=t.input_schema or {"type": "object"},
            )
            for t in box.tools
        ]
        return box, specs

    async def llm_step(self, messages: list[Message], specs: list[ToolSpec]) -> Any:
        r = await self.llm.complete(
            LLMRequest(provider=self.provider, messages=messages, tools=specs), dialect="open_ai"
        )
        self.steps += 1
        return r

    async def tool_step(self, box: Any, name: str, args: dict[str, Any], key: str) -> str:
        tool = next(t for t in box.tools if t.name == name)
        client = box.clients[tool.server]
        out = await client.call_tool(
            tool.remote_name,
            args,
            session_id=box.sessions[tool.server].session_id,
            context=CallContext(idempotency_key=key),
        )
        self.steps += 1
        return out.text

    async def run_one(self) -> int:
        box, specs = await self.discover()
        msgs = [Message(role="system", content="bench"), Message(role="user", content="go")]
        steps = 0
        while True:
            resp = await self.llm_step(msgs, specs)
            steps += 1
            if not resp.tool_calls:
                return steps
            msgs.append(Message(role="assistant", content=resp.content, tool_calls=resp.tool_calls))
            results = await asyncio.gather(
                *(
                    self.tool_step(box, c.name, c.arguments or {}, uuid.uuid4().hex)
                    for c in resp.tool_calls
                )
            )
            steps += len(results)
            for c, r in zip(resp.tool_calls, results, strict=True):
                msgs.append(Message(role="tool", content=r, tool_call_id=c.id))


class StockLoop:
    """The same loop written with stock libraries, as a user without agentd would: httpx's
    default client for the model (Chat Completions JSON) and the official `mcp` SDK's
    `Client` for the tools: one MCP session per loop, or with `shared` one session the
    process opens once and every loop uses (and `tools/list` asked once)."""

    def __init__(self, llm_url: str, mcp_url: str, *, shared: bool = False) -> None:
        self.steps = 0
        self.llm_url = llm_url.rstrip("/") + "/v1/chat/completions"
        self.mcp_url = mcp_url
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        self.http = httpx.AsyncClient(timeout=60, limits=limits)
        self.shared = shared
        self._stack = contextlib.AsyncExitStack()
        self._session: Any = None
        self._tools: Any = None
        self._opening = asyncio.Lock()

    async def aclose(self) -> None:
        await self._stack.aclose()
        await self.http.aclose()

    async def run_one(self) -> int:
        if not self.shared:
            async with mcp.Client(self.mcp_url) as session:
                return await self._loop(session, (await session.list_tools()).tools)
        async with self._opening:
            if self._session is None:
                self._session = await self._stack.enter_async_context(mcp.Client(self.mcp_url))
                self._tools = (await self._session.list_tools()).tools
        return await self._loop(self._session, self._tools)

    async def _loop(self, session: Any, tools: Any) -> int:
        specs = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or "",
                    "parameters": t.input_schema,
                },
            }
            for t in tools
        ]
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": "bench"},
            {"role": "user", "content": "go"},
        ]
        steps = 0
        while True:
            r = await self.http.post(
                self.llm_url, json={"model": "fake-model", "messages": msgs, "tools": specs}
            )
            r.raise_for_status()
            message = r.json()["choices"][0]["message"]
            self.steps += 1
            steps += 1
            calls = message.get("tool_calls") or []
            if not calls:
                return steps
            msgs.append(
                {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
            )
            results = await asyncio.gather(
                *(
                    session.call_tool(
                        c["function"]["name"], json.loads(c["function"]["arguments"] or "{}")
                    )
                    for c in calls
                )
            )
            self.steps += len(results)
            steps += len(results)
            for c, res in zip(calls, results, strict=True):
                text = "".join(getattr(b, "text", "") for b in res.content)
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": text})


async def bare_throughput(
    llm_url: str, mcp_url: str, c: int, seconds: float, warmup: float
) -> dict[str, float]:
    loop = BareLoop(llm_url, mcp_url)
    done = {"steps": 0, "loops": 0}
    stop = asyncio.Event()

    async def worker() -> None:
        while not stop.is_set():
            await loop.run_one()
            done["loops"] += 1

    tasks = [asyncio.create_task(worker()) for _ in range(c)]
    await asyncio.sleep(warmup)
    s0, l0 = loop.steps, done["loops"]
    await asyncio.sleep(seconds)
    s1, l1 = loop.steps, done["loops"]
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    await loop.aclose()
    return {"jobs_per_s": (s1 - s0) / seconds, "loops_per_s": (l1 - l0) / seconds}

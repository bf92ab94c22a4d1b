"""MCP servers built with the official `mcp` SDK 2.x that wait on the world, served by uvicorn
on 127.0.0.1 inside the test's event loop.

- `elicit`: a 2026-07-28 server whose tools need a person's input. Stateless era: a tool
  cannot call back, so it returns an InputRequiredResult and reads the answers from
  `ctx.input_responses` when the client retries (`greet`: one round; `survey`: two).
  Reject `server/discover` (`handshake=True`) and serve SSE instead, and the same tools use
  `ctx.elicit(...)`: an `elicitation/create` request on the held connection.
- `tasks`: a 2026-07-28 server with a tasks extension: `slow` (taskSupport optional) runs
  as an MCP task when the call asks for one, finishing when the test opens its gate;
  `tasks/get` and `tasks/result` are extension methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import mcp_types as t
import uvicorn
from mcp.server import MCPServer
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from agentd.mcp.port import IDEMPOTENCY_META_KEY
from agentd.testing.engine import eventually

WHO = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1}, "age": {"type": "integer"}},
    "required": ["name"],
}
COLOR = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}


class Who(BaseModel):
    name: str


@dataclass
class World:
    """What the server saw, for assertions."""

    url: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # tools/call params
    methods: list[str] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_task: bool = False

    def keys(self, tool: str) -> list[str | None]:
        return [
            (c.get("_meta") or {}).get(IDEMPOTENCY_META_KEY)
            for c in self.calls
            if c.get("name") == tool
        ]


def _ask(message: str, schema: dict[str, Any]) -> t.ElicitRequest:
    return t.ElicitRequest(
        params=t.ElicitRequestFormParams(message=message, requested_schema=schema)
    )


def build_elicit(world: World, *, handshake: bool = False) -> MCPServer:
    server = MCPServer(name="asker", version="1")
    server._lowlevel_server.middleware.append(_Recorder(world, handshake=handshake))

    @server.tool()
    async def greet(greeting: str, ctx: Context) -> Any:
        """Greet someone; asks the user whom."""
        if ctx.protocol_version != "2026-07-28":
            got = await ctx.elicit("Whom should I greet?", Who)
            return f"{greeting}, {got}"
        answers = ctx.input_responses
        if not answers:
            return t.InputRequiredResult(input_requests={"who": _ask("Whom should I greet?", WHO)})
        who = answers["who"]
        if who.action != "accept":
            return f"nobody to greet (the user chose {who.action})"
        return f"{greeting}, {who.content['name']}!"

    @server.tool()
    async def survey(ctx: Context) -> Any:
        """Two questions, one round each."""
        answers = ctx.input_responses or {}
        if ctx.request_state is None:
            return t.InputRequiredResult(
                input_requests={"who": _ask("Your name?", WHO)}, request_state="asked-name"
            )
        if ctx.request_state == "asked-name":
            name = answers["who"].content["name"]
            return t.InputRequiredResult(
                input_requests={"color": _ask(f"{name}, your favourite colour?", COLOR)},
                request_state=f"asked-color:{name}",
            )
        name = ctx.request_state.split(":", 1)[1]
        return f"{name} likes {answers['color'].content['color']}"

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    return server


class _Recorder:
    """Server middleware: records each request; in handshake mode hides the modern era."""

    def __init__(self, world: World, *, handshake: bool = False) -> None:
        self.world = world
        self.handshake = handshake

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        self.world.methods.append(ctx.method)
        if ctx.method == "server/discover" and self.handshake:
            raise MCPError(code=-32601, message="Method not found")
        if ctx.method == "tools/call":
            self.world.calls.append(dict(ctx.params or {}))
        return await call_next(ctx)


class _TasksExtension(Extension):
    identifier = "io.modelcontextprotocol/tasks"

    def __init__(self, world: World) -> None:
        self.world = world

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", t.GetTaskRequestParams, self.get),
            MethodBinding("tasks/result", t.GetTaskPayloadRequestParams, self.result),
        ]

    async def get(self, ctx: Any, params: t.GetTaskRequestParams) -> dict[str, Any]:
        return dict(self.world.tasks[params.task_id]["task"])

    async def result(self, ctx: Any, params: t.GetTaskPayloadRequestParams) -> dict[str, Any]:
        return dict(self.world.tasks[params.task_id]["result"])


class _TaskMiddleware(_Recorder):
    """Wire level (above the SDK's result validation): task-augmented `tools/call` of `slow`
    answers a task handle at once and runs the work in the background; `tools/list`
    declares `slow` as taskSupport optional."""

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params or {}
        if ctx.method == "tools/call" and params.get("task") is not None:
            self.world.methods.append(ctx.method)
            self.world.calls.append(dict(params))
            return {"task": self._start(params), "resultType": "task"}
        result = await super().__call__(ctx, call_next)
        if ctx.method == "tools/list":
            result = {
                **result,
                "tools": [
                    {**x, "execution": {"taskSupport": "optional"}} if x["name"] == "slow" else x
                    for x in result["tools"]
                ],
            }
        return result

    def _start(self, params: dict[str, Any]) -> dict[str, Any]:
        world = self.world
        task_id = uuid.uuid4().hex
        now = datetime.now(UTC).isoformat()
        task = {
            "taskId": task_id, "status": "working", "createdAt": now, "lastUpdatedAt": now,
            "ttl": params["task"].get("ttl"), "pollInterval": 50,
        }  # fmt: skip
        world.tasks[task_id] = {"task": task}

        async def run() -> None:
            await world.gate.wait()
            n = (params.get("arguments") or {}).get("n")
            if world.fail_task:
                task["status"] = "failed"
                task["statusMessage"] = "the batch crashed"
                world.tasks[task_id]["result"] = {
                    "content": [{"type": "text", "text": "the batch crashed"}], "isError": True,
                }  # fmt: skip
            else:
                world.tasks[task_id]["result"] = {
                    "content": [{"type": "text", "text": f"slow result {n}"}], "isError": False,
                }  # fmt: skip
                task["status"] = "completed"
            task["lastUpdatedAt"] = datetime.now(UTC).isoformat()

        world.tasks[task_id]["runner"] = asyncio.get_running_loop().create_task(run())
        return dict(task)


def build_tasks(world: World) -> MCPServer:
    server = MCPServer(name="tasker", version="1", extensions=[_TasksExtension(world)])
    server._lowlevel_server.middleware.append(_TaskMiddleware(world))

    @server.tool()
    async def slow(n: int) -> str:
        """A long batch job (runs as an MCP task when asked)."""
        return f"slow result {n} (inline)"

    return server


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def,override]
        yield


@contextlib.asynccontextmanager
async def serve(server: MCPServer, world: World, *, sse: bool = False) -> AsyncIterator[World]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = server.streamable_http_app(json_response=not sse)
    config = uvicorn.Config(
        app, log_config=None, access_log=False, lifespan="on", ws="none",
        timeout_graceful_shutdown=2,
    )  # fmt: skip
    http = _Server(config)
    task = asyncio.create_task(http.serve(sockets=[sock]))

    async def started() -> bool:
        if task.done():
            task.result()
        return bool(http.started)

    await eventually(started, within=10)
    world.url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    try:
        yield world
    finally:
        for entry in world.tasks.values():
            if (runner := entry.get("runner")) is not None:
                runner.cancel()
        http.should_exit = True
        await asyncio.wait_for(task, timeout=10)
        sock.close()

"""The same agent loop as bench.workload (LLM step → parallel tool steps → LLM step, same
fakes over HTTP, same client code) as a DBOS Transact workflow on a DBOS queue polled
every 0.05 s. Run as a process:

    python -m bench.dbos_app --url URL --llm URL --mcp URL --executor A [--seed N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import uuid
from typing import Any

from dbos import DBOS, DBOSConfig, Queue

from agentd import event_loop
from agentd.llm.types import Message, ToolCallRequest, ToolSpec
from bench.workload import BareLoop

POLL = 0.05
_loop: BareLoop | None = None
queue: Queue | None = None


def bare() -> BareLoop:
    assert _loop is not None
    return _loop


_box: Any = None


async def toolbox() -> Any:
    """One MCP session per process, opened on first use (DBOS at its best: a workflow does
    not pay a handshake, as an agentd loop's first turn does)."""
    global _box
    if _box is None:
        _box, _ = await bare().discover()
    return _box


@DBOS.step()
async def discover_step() -> list[dict[str, Any]]:
    box = await toolbox()
    return [
        {
            "name": t.name,
            "remote": t.remote_name,
            "server": t.server,
            "session": box.sessions[t.server].session_id,
            "description": t.description or "",
            "schema": t.input_schema or {"type": "object"},
        }
        for t in box.tools
    ]


@DBOS.step()
async def llm_step(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    msgs = [
        Message(
            role=m["role"],
            content=m.get("content"),
            tool_call_id=m.get("tool_call_id"),
            tool_calls=[ToolCallRequest(**c) for c in m.get("tool_calls", [])],
        )
        for m in messages
    ]
    specs = [
        ToolSpec(name=t["name"], description=t["description"], input_schema=t["schema"])
        for t in tools
    ]
    r = await bare().llm_step(msgs, specs)
    return {
        "content": r.content,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments, "raw_arguments": c.raw_arguments}
            for c in r.tool_calls
        ],
    }


@DBOS.step()
async def tool_step(tool: dict[str, Any], args: dict[str, Any], key: str) -> str:
    from agentd.mcp.port import CallContext

    client = (await toolbox()).clients[tool["server"]]  # the process's pooled client
    out = await client.call_tool(
        tool["remote"], args, session_id=tool["session"], context=CallContext(idempotency_key=key)
    )
    return out.text


@DBOS.workflow()
async def agent_loop(prompt: str) -> int:
    tools = await discover_step()
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "bench"},
        {"role": "user", "content": prompt},
    ]
    steps = 0
    while True:
        r = await llm_step(msgs, tools)
        steps += 1
        if not r["tool_calls"]:
            return steps
        msgs.append({"role": "assistant", "content": r["content"], "tool_calls": r["tool_calls"]})
        by = {t["name"]: t for t in tools}
        outs = await asyncio.gather(
            *(tool_step(by[c["name"]], c["arguments"] or {}, c["id"]) for c in r["tool_calls"])
        )
        steps += len(outs)
        for c, o in zip(r["tool_calls"], outs, strict=True):
            msgs.append({"role": "tool", "content": o, "tool_call_id": c["id"]})


async def run(a: argparse.Namespace) -> None:
    global _loop, queue
    _loop = BareLoop(a.llm, a.mcp)
    config: DBOSConfig = {
        "name": "bench",
        "system_database_url": a.url,
        "executor_id": a.executor,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    await DBOS.launch_async() if hasattr(DBOS, "launch_async") else DBOS.launch()
    # Seed first, then register the queue: until it is registered no worker of this process
    # dequeues from it, so the window starts on a full queue however slow the seeding (one
    # by one beside 16 running workflows it took minutes on a slow VM, and the workers had
    # drained much of it before the window opened). In batches, to be quick about it.
    for i in range(0, a.seed, 64):
        await asyncio.gather(
            *(
                DBOS.enqueue_workflow_async("agents", agent_loop, a.prompt)
                for _ in range(min(64, a.seed - i))
            )
        )
    queue = await DBOS.register_queue_async(
        "agents", worker_concurrency=a.concurrency, polling_interval_sec=POLL
    )
    print("LISTENING 0", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    await stop.wait()
    DBOS.destroy()
    os._exit(0)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--llm", required=True)
    p.add_argument("--mcp", required=True)
    p.add_argument("--executor", default=uuid.uuid4().hex[:8])
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt", default="go")
    p.add_argument("--event-loop", default="asyncio", choices=["auto", "asyncio", "uvloop"])
    a = p.parse_args(argv)
    with asyncio.Runner(loop_factory=event_loop.factory(a.event_loop)) as runner:
        runner.run(run(a))


if __name__ == "__main__":
    main(sys.argv[1:])

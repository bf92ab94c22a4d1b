"""FakeLLM as a process: `agentd fake-llm` (or `python -m agentd.testing.fake_llm`),
with rules read from a JSON file or the default script."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
from typing import Any

from agentd.testing.fake_llm.script import LastMessage, Matcher, Reply, Rule, ToolCall
from agentd.testing.fake_llm.server import FakeLLM


def rule_from_json(raw: dict[str, Any]) -> Rule:
    match = raw.get("match")
    matcher: Matcher
    if match is None:
        matcher = None
    elif isinstance(match, str):
        matcher = match
    elif "contains" in match:
        matcher = str(match["contains"])
    elif "role" in match:
        role = match["role"]
        matcher = lambda last: last.role == role  # noqa: E731
    elif "tool_name" in match:
        tool = match["tool_name"]
        matcher = lambda last: last.tool_name == tool  # noqa: E731
    else:
        raise ValueError(f"unknown match {match!r}")
    fields = dict(raw.get("reply") or {})
    fields["tool_calls"] = [ToolCall(**c) for c in fields.get("tool_calls") or []]
    if fields.get("usage") is not None:
        fields["usage"] = tuple(fields["usage"])
    return Rule(match=matcher, reply=Reply(**fields), times=raw.get("times"))


_CALL = re.compile(r"^\s*/call\s+(\S+)\s*(.*)$", re.S)


def _default_reply(last: LastMessage) -> Reply:
    """Echo, or the scripted tool call a `/call NAME {json}` message asks for."""
    streamed: dict[str, Any] = {"chunk_size": 3, "chunk_delay": 0.05}  # token by token
    if last.role == "tool":
        return Reply(content=f"The tool {last.tool_name or ''} answered: {last.text}", **streamed)
    m = _CALL.match(last.text)
    if m:
        raw = m.group(2).strip() or "{}"
        try:
            args = json.loads(raw)
        except json.JSONDecodeError:
            return Reply(content=f"/call needs JSON arguments, got {raw!r}", **streamed)
        return Reply(content=f"Calling {m.group(1)}.", tool_calls=[ToolCall(m.group(1), args)])
    return Reply(content=f"echo: {last.text}", **streamed)


def default_rules() -> list[Rule]:
    """The offline model's script when no rules are given (`agentd fake-llm`)."""
    return [Rule(match=None, reply=_default_reply)]


async def serve_forever(fake: FakeLLM) -> None:
    await fake.start()
    print(f"LISTENING {fake.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fake.stop()


def serve_command(args: argparse.Namespace) -> int:
    """`agentd fake-llm`: args carry host, port and rules (a JSON file, or None)."""
    rules = default_rules()
    if args.rules:
        try:
            with open(args.rules, encoding="utf-8") as f:
                rules = [rule_from_json(r) for r in json.load(f)]
        except (OSError, ValueError, TypeError) as exc:
            print(f"agentd fake-llm: cannot read rules from {args.rules}: {exc}", file=sys.stderr)
            return 2
    try:
        asyncio.run(serve_forever(FakeLLM(rules, host=args.host, port=args.port)))
    except OSError as exc:
        print(
            f"agentd fake-llm: cannot listen on {args.host}:{args.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return 5
    return 0


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentd.testing.fake_llm")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rules", help="JSON file: a list of rules (default: echo / /call)")
    sys.exit(serve_command(parser.parse_args(argv)))

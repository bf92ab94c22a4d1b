"""Toolsets and authorizers the mounted-server tests serve (importable as `module:attr`).

Tool and prompt names starting with `test_` are the fixtures the official conformance
suite calls (`@modelcontextprotocol/conformance` server scenarios).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentd.mcp.mounts import McpMount
from agentd.mcp.port import CallContext
from agentd.mcp.toolset import Toolset

TOKENS = {"alice-token": "alice", "bob-token": "bob"}


class CountingToolset(Toolset):
    """A Toolset that counts what reached its dispatcher, by method."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dispatched: Counter[str] = Counter()

    async def handle(self, envelope: Any, **kwargs: Any) -> Any:
        if isinstance(envelope, dict):
            self.dispatched[str(envelope.get("method"))] += 1
        return await super().handle(envelope, **kwargs)


def build_demo() -> CountingToolset:
    demo = CountingToolset("demo", version="1.0.0", instructions="agentd test toolset")

    @demo.tool(description="Return a simple text")
    def test_simple_text() -> str:
        return "This is a simple text response for testing."

    @demo.tool(description="Always fails with a message")
    def test_error_handling() -> str:
        raise RuntimeError("This tool intentionally returns an error for testing")

    @demo.tool(description="Add two integers")
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @demo.tool(description="Describe the caller")
    def whoami(ctx: CallContext) -> dict[str, Any]:
        return {
            "principal": ctx.principal,
            "idempotency_key": ctx.idempotency_key,
            "has_loop": ctx.loop is not None,
            "has_agent": ctx.agent is not None,
        }

    @demo.prompt(description="A simple prompt")
    def test_simple_prompt(args: dict[str, Any], ctx: CallContext) -> str:
        return "This is a simple prompt for testing."

    @demo.prompt(
        description="A prompt with arguments",
        arguments=[
            {"name": "arg1", "description": "First test argument", "required": True},
            {"name": "arg2", "description": "Second test argument", "required": True},
        ],
    )
    def test_prompt_with_arguments(args: dict[str, Any], ctx: CallContext) -> str:
        return f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'"

    return demo


demo = build_demo()

minting = Toolset("minting")


@minting.on_initialize
def _mint(params: dict[str, Any], ctx: CallContext) -> str:
    return f"minted-{params['clientInfo']['name']}-{ctx.principal}"


@minting.tool(description="Echo")
def echo(text: str) -> str:
    return text


def build_hostile() -> CountingToolset:
    """String-taking tools and prompts, for hostile-input tests."""
    hostile = CountingToolset("hostile", version="1.0.0")

    @hostile.tool(description="Echo the text")
    def echo(text: str) -> str:
        return text

    @hostile.tool(description="Echo the text as structured content")
    def echo_structured(text: str, note: str = "") -> dict[str, str]:
        return {"text": text, "note": note}

    @hostile.prompt(description="Echo an argument", arguments=[{"name": "text", "required": True}])
    def echo_prompt(args: dict[str, Any], ctx: CallContext) -> str:
        return f"said: {args['text']}"

    return hostile


hostile = build_hostile()

seen_tokens: list[str | None] = []


def demo_tokens(token: str | None, request: Any) -> str | None:
    seen_tokens.append(token)
    return TOKENS.get(token or "")


async def async_demo_tokens(token: str | None, request: Any) -> str | None:
    return TOKENS.get(token or "")


def allow_all(token: str | None, request: Any) -> str:
    """The conformance suite sends no credentials: serving without auth is written out."""
    return "anonymous"


def demo_mount() -> McpMount:
    return McpMount(toolset=build_demo(), authorizer=async_demo_tokens)

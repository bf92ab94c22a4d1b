"""`agentd.Agent`: the base class users subclass to define an agent.

Constants are plain class attributes; anything that depends on the loop can be written as
a property or method instead (the instance has `self.loop`, `self.state`, `self.subject`).
Hooks that may need I/O (`llm_provider`, `mcp_servers`) may be sync or async.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from uuid import UUID

from agentd.builder import Builder
from agentd.errors import ConfigError
from agentd.llm.types import Provider

if TYPE_CHECKING:
    from agentd.mcp.config import McpServerConfig

T = TypeVar("T")


@dataclass(frozen=True)
class LoopView:
    """What an agent may read about its loop."""

    id: UUID | None = None
    subject: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    step_count: int = 0


class Agent:
    """Base class of every agent. Override what you need.

    ```python
    class Support(agentd.Agent):
        system_prompt = "You are a support agent."
        base_url = "https://api.openai.com"
        model = "gpt-4o"
        api_key_env = "OPENAI_API_KEY"
        mcps = [{"name": "billing", "url": "http://billing:9100/mcp"}]
    ```
    """

    name: ClassVar[str] = ""  # set by the registry (entry-point or config name)

    system_prompt: str = ""
    dialect: str = "open_ai"  # open_ai | anthropic | gemini
    base_url: str = ""  # an origin; the dialect appends its path
    model: str = ""
    model_name: str | None = None  # gemini URL model name, if different
    api_token: str | None = None
    api_key_env: str | None = None
    read_timeout: float | None = None
    idle_timeout: float | None = None
    streaming: bool = False
    mcps: ClassVar[list[Any]] = []
    # Other agents this one may call as tools, each started as a child loop: agent names,
    # or dicts {"agent", "name", "description", "detach"} (docs/agents.md, "Child loops").
    agent_tools: ClassVar[list[Any]] = []
    llm_params: ClassVar[dict[str, Any]] = {}
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    reasoning_strategies: ClassVar[list[str] | None] = None
    sequential_tool_calls: bool = False
    # Most tool calls one model answer may ask for; more fails the loop, nothing run.
    # None: AGENTD_MAX_TOOL_CALLS_PER_TURN.
    max_tool_calls_per_turn: int | None = None
    max_steps: int | None = 50
    max_duration: float | None = None  # seconds for one turn; None = settings default
    refresh_mcp_tools: bool = True
    approval_required: ClassVar[list[str]] = []  # advertised tool names that need a person
    approval_timeout: float | None = None  # seconds; past it the reaper denies as expired
    # Fleet-wide limits on this agent's provider key (base_url + model + token fingerprint),
    # shared with every agent on the same key; the stricter of these and a matching
    # [providers.*] table applies (docs/limits.md). None: no limit.
    provider_max_concurrency: int | None = None
    provider_rpm: int | None = None
    provider_tpm: int | None = None
    # At most `concurrency_limit` loops with this key run at once; a start request may name
    # its own key (e.g. a customer id). Both None: no key.
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    # Long loops (docs/long-loops.md). A budget pauses the loop (`token_budget_exceeded`);
    # loop state `max_tokens_total` overrides it per loop.
    max_tokens_total: int | None = None  # prompt + completion tokens the loop may spend
    # Cost (docs/limits.md): USD per million tokens for this agent's model, as
    # {"input": ..., "output": ..., "cached_input": ..., "reasoning": ...}; None: the
    # [prices.*] tables, then the built-in table. `max_cost` (USD) pauses the loop
    # (`cost_budget_exceeded`); loop state `max_cost` overrides it per loop.
    prices: ClassVar[dict[str, Any] | None] = None
    max_cost: float | str | None = None
    context_window: int | None = None  # the model's window in tokens; None = never compact
    compaction_threshold: float = 0.8  # compact when the prompt reaches this share of it
    compaction_keep_tail: int = 6  # recent messages kept verbatim after the summary
    # "pin": a loop finishes on the agent version it started on (unless upgraded on
    # request); "latest": it moves to the newest version at each turn boundary
    # (docs/upgrading.md, "Changing an agent under running loops").
    version_policy: str = "pin"
    compaction_prompt: str = (
        "Summarise the conversation above so that you can continue the task from the "
        "summary alone: the goal, what was done and found (with exact names, numbers and "
        "identifiers), decisions taken, and what remains to do. Do not call any tools; "
        "answer with the summary only."
    )

    def __init__(self, loop: LoopView | None = None) -> None:
        self.loop = loop or LoopView()

    @property
    def state(self) -> dict[str, Any]:
        return self.loop.state

    @property
    def subject(self) -> str | None:
        return self.loop.subject

    @property
    def mcp_principal(self) -> object:
        """`ctx.principal` for in-process tool calls; the loop's subject by default (any
        value: agentd only hands it to the tools)."""
        return self.loop.subject

    def llm_provider(self) -> Provider | Awaitable[Provider]:
        """Where to send this loop's turns. Override for per-loop endpoints or vaults."""
        token = self.api_token
        if token is None and self.api_key_env:
            token = os.environ.get(self.api_key_env) or None
            if token is None:
                # Sent without its key, the request would fail as a bare 401 (or pass a
                # proxy unauthenticated): fail the turn naming what to set instead.
                raise ConfigError(
                    f"agent {self.name!r}: environment variable {self.api_key_env} "
                    "(its api_key_env) is not set in the worker's environment"
                )
        return Provider(
            base_url=self.base_url,
            model=self.model,
            api_token=token,
            read_timeout=self.read_timeout,
            idle_timeout=self.idle_timeout,
            model_name=self.model_name,
        )

    def mcp_servers(self) -> list[Any] | Awaitable[list[Any]]:
        """This loop's MCP server entries (dicts or McpServerConfig). Defaults to `mcps`."""
        return list(self.mcps)

    # The builders are a Builder[TurnContext] and a Builder[ToolContext]. They are typed
    # Builder[Any] here because the contexts carry the agent: naming them in this module
    # would tie the two in a circle, and an edit takes middleware classes, never a context.
    # An override may annotate the precise type (`agentd.Builder[agentd.TurnContext]`).

    @classmethod
    def configure_llm_middlewares(cls, builder: Builder[Any]) -> None:
        """Edit this agent's LLM turn pipeline (insert_before/after, replace, delete, use)."""

    @classmethod
    def configure_tool_middlewares(cls, builder: Builder[Any]) -> None:
        """Edit this agent's tool call pipeline."""


async def resolve(value: T | Awaitable[T]) -> T:
    """Await a hook's value if it is awaitable (hooks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


async def agent_mcp_configs(agent: Agent) -> list[McpServerConfig]:
    """The agent's MCP servers for its loop: its `mcp_servers()` hook (sync or async), parsed."""
    from agentd.mcp.config import McpServerConfig  # a pydantic model: not built at `import agentd`

    entries = await resolve(agent.mcp_servers())
    configs = [e if isinstance(e, McpServerConfig) else McpServerConfig.parse(e) for e in entries]
    # Its agent tools (agentd/agent_tools.py), built once when the registry named the class.
    children = getattr(type(agent), "_agent_tool_server", None)
    if children is not None:
        configs.append(children)
    return configs

"""The agent registry: entry-point agents (`agentd.agents`) and TOML-configured agents.

This is the one piece of process-wide state agentd keeps (ARCHITECTURE.md).
"""

from __future__ import annotations

import importlib
import inspect
import os
from dataclasses import dataclass
from decimal import Decimal
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from agentd import agent_tools, logs, versions
from agentd.agent import Agent, LoopView
from agentd.errors import ConfigError, UnknownAgent
from agentd.llm.dialects import base as dialects_base
from agentd.settings import PriceConfig

if TYPE_CHECKING:
    from agentd.mcp.config import McpServerConfig

log = logs.get("agentd.registry")

ENTRY_POINT_GROUP = "agentd.agents"


class McpEntryConfig(BaseModel):
    """An `[[agents.NAME.mcps]]` table. Secrets come from env vars named here."""

    model_config = ConfigDict(extra="forbid")

    name: str
    url: str | None = None
    command: list[str] | None = None
    api_token_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    tools: list[str] | None = None
    required_tools: list[str] = Field(default_factory=list)
    prefix: str | None = None
    session_recovery: Literal["auto", "fail"] = "auto"
    session: Literal["auto", "loop", "process"] | None = None  # None: McpServerConfig's default
    session_ttl: float | None = None
    timeout: float = 60.0
    env: dict[str, str] | None = None
    cwd: str | None = None

    # The parsed config, with the token it was built with: every job of the agent asks for
    # it, and dumping and validating it each time cost ~0.1 ms a job.
    _built: tuple[str | None, McpServerConfig] | None = PrivateAttr(default=None)

    def entry(self) -> dict[str, Any]:
        data = self.model_dump(exclude={"api_token_env"}, exclude_none=True)
        if self.api_token_env:
            data["api_token"] = os.environ.get(self.api_token_env)
        return data

    def server(self) -> McpServerConfig:
        """The server's config; rebuilt when its token variable's value changes."""
        token = os.environ.get(self.api_token_env) if self.api_token_env else None
        built = self._built
        if built is None or built[0] != token:
            from agentd.mcp.config import McpServerConfig  # pydantic-heavy: not at import

            built = self._built = (token, McpServerConfig.parse(self.entry()))
        return built[1]


class AgentConfig(BaseModel):
    """An `[agents.NAME]` table of the config file."""

    model_config = ConfigDict(extra="forbid")

    dialect: Literal["open_ai", "anthropic", "gemini"] = "open_ai"
    base_url: str
    model: str
    model_name: str | None = None
    api_key_env: str | None = None
    system_prompt: str = ""
    streaming: bool = False
    read_timeout: float | None = Field(None, gt=0)
    idle_timeout: float | None = Field(None, gt=0)
    sequential_tool_calls: bool = False
    max_tool_calls_per_turn: int | None = Field(None, ge=1)
    max_steps: int | None = Field(50, ge=1)
    max_duration: float | None = Field(None, gt=0)
    llm_params: dict[str, Any] = Field(default_factory=dict)
    reasoning_effort: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    reasoning_strategies: list[str] | None = None
    refresh_mcp_tools: bool = True
    approval_required: list[str] = Field(default_factory=list)
    approval_timeout: float | None = Field(None, gt=0)
    max_tokens_total: int | None = Field(None, ge=1)
    max_cost: Decimal | None = Field(None, gt=0, allow_inf_nan=False)
    prices: PriceConfig | None = None
    context_window: int | None = Field(None, ge=1)
    compaction_threshold: float = Field(0.8, gt=0, le=1)
    compaction_keep_tail: int = Field(6, ge=0)
    compaction_prompt: str | None = None
    provider_max_concurrency: int | None = Field(None, ge=1)
    provider_rpm: int | None = Field(None, ge=1)
    provider_tpm: int | None = Field(None, ge=1)
    concurrency_key: str | None = Field(None, min_length=1)
    concurrency_limit: int | None = Field(None, ge=1)
    mcps: list[McpEntryConfig] = Field(default_factory=list)
    agent_tools: list[str | dict[str, Any]] = Field(default_factory=list)
    version_policy: Literal["pin", "latest"] = "pin"


def _import_class(name: str, path: str) -> type[Agent]:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ConfigError(f"[agents.{name}] class must look like 'package.module:ClassName'")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except Exception as exc:
        raise ConfigError(
            f"[agents.{name}] class {path!r} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    if not (isinstance(obj, type) and issubclass(obj, Agent)):
        raise ConfigError(f"[agents.{name}] class {path!r} is not a subclass of agentd.Agent")
    return obj


def agent_from_config(name: str, raw: dict[str, Any]) -> type[Agent]:
    """A TOML agent: all keys, or `class = "module:Class"` plus attribute overrides."""
    if "class" in raw:
        base = _import_class(name, str(raw["class"]))
        overrides = {k: v for k, v in raw.items() if k != "class"}
        unknown = sorted(set(overrides) - set(AgentConfig.model_fields) - {"mcps"})
        if unknown:
            raise ConfigError(f"[agents.{name}]: unknown key(s) {unknown}")
        if overrides.get("version_policy", "pin") not in versions.POLICIES:
            raise ConfigError(f"[agents.{name}] version_policy must be 'pin' or 'latest'")
        return type(base.__name__, (base,), {**overrides, "__module__": base.__module__})
    try:
        cfg = AgentConfig.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key {loc!r}")
            else:
                problems.append(f"{loc}: {err['msg']}")
        raise ConfigError(f"[agents.{name}]: " + "; ".join(problems)) from None
    entries = cfg.mcps

    class ConfiguredAgent(Agent):
        dialect = cfg.dialect
        base_url = cfg.base_url
        model = cfg.model
        model_name = cfg.model_name
        api_key_env = cfg.api_key_env
        system_prompt = cfg.system_prompt
        streaming = cfg.streaming
        read_timeout = cfg.read_timeout
        idle_timeout = cfg.idle_timeout
        sequential_tool_calls = cfg.sequential_tool_calls
        max_tool_calls_per_turn = cfg.max_tool_calls_per_turn
        max_steps = cfg.max_steps
        max_duration = cfg.max_duration
        llm_params = cfg.llm_params
        reasoning_effort = cfg.reasoning_effort
        max_tokens = cfg.max_tokens
        reasoning_strategies = cfg.reasoning_strategies
        refresh_mcp_tools = cfg.refresh_mcp_tools
        approval_required = cfg.approval_required
        approval_timeout = cfg.approval_timeout
        provider_max_concurrency = cfg.provider_max_concurrency
        provider_rpm = cfg.provider_rpm
        provider_tpm = cfg.provider_tpm
        concurrency_key = cfg.concurrency_key
        concurrency_limit = cfg.concurrency_limit
        max_tokens_total = cfg.max_tokens_total
        max_cost = str(cfg.max_cost) if cfg.max_cost is not None else None
        prices = cfg.prices.model_dump(exclude_none=True) if cfg.prices else None
        context_window = cfg.context_window
        compaction_threshold = cfg.compaction_threshold
        compaction_keep_tail = cfg.compaction_keep_tail
        compaction_prompt = cfg.compaction_prompt or Agent.compaction_prompt
        version_policy = cfg.version_policy
        agent_tools = cfg.agent_tools
        _mcp_entries = entries  # what its version records (agentd/versions.py)
        _configured_as = True

        def mcp_servers(self) -> list[Any]:
            # Token env vars are read per call (a changed value rebuilds the config); the
            # secrets live in the parsed configs, never in class attributes.
            return [e.server() for e in entries]

    ConfiguredAgent.__name__ = ConfiguredAgent.__qualname__ = f"ConfiguredAgent[{name}]"
    return ConfiguredAgent


def _static_base_url_problem(cls: type[Agent]) -> str | None:
    """A base_url the class states outright (TOML, or a class attribute) checked against
    its dialect at load, so `agentd up` refuses it before any loop runs; one computed per
    loop (a property) is checked by the LLM client before each call."""
    base_url = inspect.getattr_static(cls, "base_url", None)
    dialect = inspect.getattr_static(cls, "dialect", "open_ai")
    if not isinstance(base_url, str) or not isinstance(dialect, str):
        return None
    return dialects_base.base_url_problem(dialect, base_url)


@dataclass(frozen=True)
class AgentVersion:
    """One agent definition as this process loaded it (agentd/versions.py)."""

    id: str
    agent: str
    fingerprint: str
    definition: dict[str, Any]


class AgentRegistry:
    """Name → Agent subclass."""

    def __init__(self) -> None:
        self._agents: dict[str, type[Agent]] = {}
        self._sources: dict[str, str] = {}
        self._versions: dict[str, AgentVersion] | None = None
        self._version_ids: tuple[list[str], frozenset[str]] | None = None

    def register(self, name: str, cls: type[Agent], *, source: str = "code") -> None:
        if not isinstance(cls, type) or not issubclass(cls, Agent):
            raise ConfigError(f"agent {name!r} ({source}) is not a subclass of agentd.Agent")
        if name in self._agents:
            raise ConfigError(
                f"duplicate agent name {name!r}: from {self._sources[name]} and {source}"
            )
        problem = _static_base_url_problem(cls)
        if problem is not None:
            raise ConfigError(f"agent {name!r} ({source}): {problem}")
        tools = agent_tools.parse(name, getattr(cls, "agent_tools", None))
        attrs: dict[str, Any] = {"name": name, "__module__": cls.__module__}
        if tools:
            attrs["_agent_tools"] = tools
            attrs["_agent_tool_server"] = agent_tools.server(name, tools)
        named = type(cls.__name__, (cls,), attrs)
        self._agents[name] = named
        self._sources[name] = source
        self._versions = self._version_ids = None

    def load_entry_points(self) -> None:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                cls = ep.load()
            except Exception as exc:
                raise ConfigError(
                    f"agent {ep.name!r} failed to import from {ep.value}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            self.register(ep.name, cls, source=f"entry point {ep.value}")

    def load_config(self, agents: dict[str, dict[str, Any]]) -> None:
        for name, raw in agents.items():
            self.register(name, agent_from_config(name, raw), source="config file")

    def warn_missing_keys(self) -> list[str]:
        """Log one warning per agent whose `api_key_env` names an unset variable (its
        turns will fail until it is set); return those agent names."""
        missing = []
        for name in self.names():
            cls = self._agents[name]
            env = getattr(cls, "api_key_env", None)
            token = getattr(cls, "api_token", None)
            if not isinstance(env, str) or not env or (isinstance(token, str) and token):
                continue  # no key named, a literal token, or a property resolved per loop
            if not os.environ.get(env):
                log.warning(
                    "agent.api_key_missing",
                    agent=name,
                    variable=env,
                    hint=f"set {env}; until then this agent's turns fail",
                )
                missing.append(name)
        return missing

    def warn_unknown_agent_tools(self) -> list[tuple[str, str]]:
        """Log one warning per `agent_tools` entry naming an agent this process does not
        have (a call to it would be an error result: the worker running the parent starts
        the child); return (agent, named) pairs."""
        unknown = []
        for name in self.names():
            for tool in getattr(self._agents[name], "_agent_tools", ()):
                if tool.agent not in self._agents:
                    log.warning(
                        "agent.agent_tool_unknown",
                        agent=name,
                        tool=tool.tool_name,
                        names=tool.agent,
                        hint=f"register {tool.agent!r}; until then calls to it are tool errors",
                    )
                    unknown.append((name, tool.agent))
        return unknown

    def names(self) -> list[str]:
        return sorted(self._agents)

    def get(self, name: str) -> type[Agent]:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(self.names()) or "none registered"
            raise UnknownAgent(f"unknown agent {name!r} (known: {known})", agent=name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def instantiate(self, name: str, loop: LoopView) -> Agent:
        return self.get(name)(loop)

    def versions(self) -> dict[str, AgentVersion]:
        """Each agent's version as loaded here, by agent name (computed once)."""
        if self._versions is None:
            out = {}
            dists = versions.distributions()
            for name in self.names():
                defn = versions.definition(name, self._agents[name], dists)
                fp = versions.fingerprint(name, defn)
                out[name] = AgentVersion(versions.version_id(fp), name, fp, defn)
            self._versions = out
        return self._versions

    def version_of(self, name: str) -> str | None:
        v = self.versions().get(name)
        return v.id if v is not None else None

    def version_ids(self) -> list[str]:
        """The versions this process can run (what its claims ask for)."""
        return self._ids()[0]

    def can_run(self, version: str | None) -> bool:
        return version is not None and version in self._ids()[1]

    def _ids(self) -> tuple[list[str], frozenset[str]]:
        if self._version_ids is None:
            ids = sorted(v.id for v in self.versions().values())
            self._version_ids = (ids, frozenset(ids))
        return self._version_ids

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for name in self.names():
            cls = self._agents[name]
            out.append(
                {
                    "name": name,
                    "source": self._sources[name],
                    "dialect": cls.dialect,
                    "model": cls.model if isinstance(cls.model, str) else None,
                    "streaming": cls.streaming if isinstance(cls.streaming, bool) else None,
                    "sequential_tool_calls": cls.sequential_tool_calls
                    if isinstance(cls.sequential_tool_calls, bool)
                    else None,
                }
            )
        return out


def build_registry(
    settings_agents: dict[str, dict[str, Any]], *, entry_points_too: bool = True
) -> AgentRegistry:
    reg = AgentRegistry()
    if entry_points_too:
        reg.load_entry_points()
    reg.load_config(settings_agents)
    return reg

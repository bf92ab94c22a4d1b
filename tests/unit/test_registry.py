from __future__ import annotations

import pytest

from agentd import Agent
from agentd.agent import LoopView, resolve
from agentd.errors import ConfigError, UnknownAgent
from agentd.registry import AgentRegistry, agent_from_config

BASE = {"base_url": "http://127.0.0.1:9000", "model": "gpt-4o"}


def test_config_agent_has_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("BILLING_TOKEN", "tok")
    cls = agent_from_config(
        "support",
        {
            **BASE,
            "dialect": "anthropic",
            "api_key_env": "OPENAI_API_KEY",
            "system_prompt": "Be kind.",
            "streaming": True,
            "read_timeout": 120,
            "idle_timeout": 45,
            "sequential_tool_calls": True,
            "max_steps": 9,
            "llm_params": {"temperature": 0.2},
            "approval_required": ["refund"],
            "mcps": [
                {
                    "name": "billing",
                    "url": "http://127.0.0.1:9100/mcp",
                    "api_token_env": "BILLING_TOKEN",
                    "tools": ["lookup"],
                    "prefix": "billing",
                },
                {"name": "fs", "command": ["npx", "server"], "timeout": 30},
                {"name": "calc", "url": "http://c/mcp", "session": "process", "session_ttl": 9},
            ],
        },
    )
    agent = cls(LoopView())
    assert (agent.dialect, agent.streaming, agent.max_steps) == ("anthropic", True, 9)
    assert agent.approval_required == ["refund"] and agent.sequential_tool_calls
    provider = agent.llm_provider()
    assert provider.api_token == "sk-secret-value" and provider.read_timeout == 120
    assert provider.idle_timeout == 45
    servers = agent.mcp_servers()
    assert servers[0].api_token == "tok" and servers[0].prefix == "billing"
    assert servers[1].command == ["npx", "server"] and servers[1].timeout == 30
    assert (servers[0].session, servers[2].session, servers[2].session_ttl) == (
        "auto",
        "process",
        9,
    )
    assert agent.mcp_servers()[0] is servers[0]  # parsed once, not per job
    monkeypatch.setenv("BILLING_TOKEN", "rotated")
    assert agent.mcp_servers()[0].api_token == "rotated"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({**BASE, "modle": "x"}, "unknown key 'modle'"),
        ({**BASE, "mcps": [{"name": "a", "url": "u", "tokn": 1}]}, "unknown key 'mcps.0.tokn'"),
        ({"model": "m"}, "base_url"),
        ({**BASE, "dialect": "cohere"}, "dialect"),
        ({"class": "nowhere.module:Agent"}, "failed to import"),
        ({"class": "agentd.testing.agents:CalcAgent", "colour": "red"}, "unknown key"),
        ({"class": "agentd.errors:ConfigError"}, "not a subclass"),
    ],
)
def test_bad_config_agents_are_errors_naming_the_problem(raw: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=message):
        agent_from_config("support", raw)


def test_class_agent_with_overrides() -> None:
    cls = agent_from_config("calc2", {"class": "agentd.testing.agents:CalcAgent", "max_steps": 3})
    assert cls.max_steps == 3 and cls.system_prompt == "You add numbers."


def test_registry_errors_name_the_agent() -> None:
    reg = AgentRegistry()
    reg.register("a", Agent)
    with pytest.raises(ConfigError, match="duplicate agent name 'a'"):
        reg.register("a", Agent)
    with pytest.raises(UnknownAgent, match="unknown agent 'b'"):
        reg.get("b")
    with pytest.raises(ConfigError, match="not a subclass"):
        reg.register("c", object)  # type: ignore[arg-type]
    assert reg.get("a").name == "a" and Agent.name == ""


async def test_hooks_may_be_async_and_read_loop_state() -> None:
    class PerLoop(Agent):
        model = "m"

        @property
        def base_url(self) -> str:  # type: ignore[override]
            return str(self.state["endpoint"])

        async def mcp_servers(self):  # type: ignore[no-untyped-def,override]
            return [{"name": "x", "url": f"{self.state['endpoint']}/mcp"}]

    agent = PerLoop(LoopView(state={"endpoint": "http://h:1"}, subject="cust-1"))
    assert (await resolve(agent.llm_provider())).base_url == "http://h:1"
    assert (await resolve(agent.mcp_servers()))[0]["url"] == "http://h:1/mcp"
    assert agent.mcp_principal == "cust-1"


def test_missing_api_key_env_warns_once_per_agent_at_startup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import structlog

    monkeypatch.delenv("AGENTD_TEST_UNSET_KEY", raising=False)
    monkeypatch.setenv("AGENTD_TEST_SET_KEY", "sk-1")
    reg = AgentRegistry()
    reg.load_config(
        {
            "a": {**BASE, "api_key_env": "AGENTD_TEST_UNSET_KEY"},
            "b": {**BASE, "api_key_env": "AGENTD_TEST_SET_KEY"},
            "c": {**BASE},
        }
    )
    with structlog.testing.capture_logs() as logs:
        assert reg.warn_missing_keys() == ["a"]
    assert [(e["event"], e["agent"], e["variable"]) for e in logs] == [
        ("agent.api_key_missing", "a", "AGENTD_TEST_UNSET_KEY")
    ]


async def test_missing_api_key_env_fails_provider_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AGENTD_TEST_UNSET_KEY", raising=False)
    cls = agent_from_config("a", {**BASE, "api_key_env": "AGENTD_TEST_UNSET_KEY"})
    with pytest.raises(ConfigError, match="AGENTD_TEST_UNSET_KEY"):
        await resolve(cls(LoopView()).llm_provider())
    monkeypatch.setenv("AGENTD_TEST_UNSET_KEY", "sk-2")
    assert (await resolve(cls(LoopView()).llm_provider())).api_token == "sk-2"


@pytest.mark.parametrize(
    ("dialect", "base_url", "bad"),
    [
        ("open_ai", "https://api.openai.com/v1", True),
        ("open_ai", "https://openrouter.ai/api/v1/", True),
        ("anthropic", "https://api.anthropic.com/v1", True),
        ("gemini", "https://generativelanguage.googleapis.com/v1beta", True),
        ("open_ai", "https://api.openai.com", False),
        ("open_ai", "https://openrouter.ai/api", False),
        ("open_ai", "http://127.0.0.1:9/v10", False),
        ("gemini", "https://generativelanguage.googleapis.com", False),
    ],
)
def test_a_toml_agent_whose_base_url_doubles_the_version_segment_is_refused_at_load(
    dialect: str, base_url: str, bad: bool
) -> None:
    raw = {"dialect": dialect, "base_url": base_url, "model": "m"}
    registry = AgentRegistry()
    if not bad:
        registry.load_config({"ok": raw})
        return
    with pytest.raises(ConfigError, match=r"agent 'bad' \(config file\): base_url .*drop the"):
        registry.load_config({"bad": raw})


def test_a_code_agent_with_a_v1_base_url_attribute_is_refused_at_registration() -> None:
    class Sdkish(Agent):
        base_url = "https://api.openai.com/v1"
        model = "gpt-4o"

    with pytest.raises(ConfigError, match=r"base_url = https://api\.openai\.com "):
        AgentRegistry().register("sdkish", Sdkish)


def test_an_agent_tool_naming_an_unloaded_agent_is_warned_at_startup() -> None:
    import structlog

    reg = AgentRegistry()
    reg.load_config(
        {
            "lead": {**BASE, "agent_tools": ["helper", {"agent": "ghost", "name": "boo"}]},
            "helper": {**BASE},
        }
    )
    with structlog.testing.capture_logs() as logs:
        assert reg.warn_unknown_agent_tools() == [("lead", "ghost")]
    assert [(e["event"], e["agent"], e["tool"], e["names"]) for e in logs] == [
        ("agent.agent_tool_unknown", "lead", "boo", "ghost")
    ]

"""Provider keys, limit resolution (agent attributes vs [providers.*]) and the estimate."""

from __future__ import annotations

import pytest

from agentd.agent import Agent
from agentd.errors import ConfigError
from agentd.llm.types import LLMRequest, Message, Provider
from agentd.pipeline.llm.limits import ProviderKey, ProviderLimits, estimate_tokens, limits_for
from agentd.registry import agent_from_config
from agentd.settings import Settings, load_settings


def test_provider_key_fingerprints_the_token_and_never_holds_it() -> None:
    a = ProviderKey.of(Provider(base_url="https://x.test/", model="m", api_token="sk-secret"))
    b = ProviderKey.of(Provider(base_url="https://x.test", model="m", api_token="sk-other"))
    assert a.base_url == "https://x.test" and len(a.key_fingerprint) == 12
    assert a.id != b.id and "sk-secret" not in repr(a)
    assert ProviderKey.of(Provider(base_url="https://x.test", model="m")).key_fingerprint == "none"


def test_the_stricter_of_agent_and_matching_provider_tables_applies() -> None:
    class Limited(Agent):
        provider_rpm = 100
        provider_tpm = 5_000

    settings = Settings(
        providers={
            "openai": {"base_url": "https://x.test", "rpm": 50, "max_concurrency": 4},
            "other_model": {"base_url": "https://x.test", "model": "big", "tpm": 10},
            "other_host": {"base_url": "https://y.test", "rpm": 1},
        }
    )
    got = limits_for(settings, Limited(), Provider(base_url="https://x.test/", model="m"))
    assert got == ProviderLimits(max_concurrency=4, rpm=50, tpm=5_000)
    assert not limits_for(Settings(), Agent(), Provider(base_url="https://x.test", model="m"))


def test_a_providers_table_with_an_unknown_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"providers\.openai"):
        load_settings(providers={"openai": {"base_url": "https://x.test", "rpn": 5}})


def test_the_estimate_counts_the_prompt_and_the_completion_budget() -> None:
    req = LLMRequest(
        provider=Provider(base_url="https://x.test", model="m"),
        messages=[Message(role="user", content="x" * 400)],
        max_tokens=50,
    )
    assert estimate_tokens(req) == 100 + 1 + 50


def test_toml_agents_take_the_limit_and_key_attributes() -> None:
    cls = agent_from_config(
        "a",
        {
            "base_url": "https://x.test",
            "model": "m",
            "provider_max_concurrency": 2,
            "provider_tpm": 1000,
            "concurrency_key": "tenant",
            "concurrency_limit": 3,
        },
    )
    assert (cls.provider_max_concurrency, cls.provider_tpm, cls.provider_rpm) == (2, 1000, None)
    assert (cls.concurrency_key, cls.concurrency_limit) == ("tenant", 3)

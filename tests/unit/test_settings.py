from __future__ import annotations

from pathlib import Path

import pytest

from agentd.errors import ConfigError
from agentd.settings import load_settings


def test_defaults_match_the_reference() -> None:
    s = load_settings()
    assert (s.lease_margin, s.queued_reap_threshold, s.default_read_timeout) == (60, 300, 600)
    assert (s.default_tool_timeout, s.lease_leak_grace, s.default_max_duration) == (600, 300, 7200)
    assert (s.llm_retries, s.llm_retry_base_delay, s.llm_retry_max_delay) == (2, 1.0, 60.0)
    assert s.llm_retry_statuses == [408, 409, 429, 500, 502, 503, 504]
    assert s.event_retention is None and s.mcp_inbound_session_retention is None
    assert s.janitor_batch_size == 1000
    assert s.lease_seconds(None) == 660


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AGENTD_LEASE_MARGIN": "0"}, "lease_margin must be > 0"),
        ({"AGENTD_LEASE_LEAK_GRACE": "-1"}, "lease_leak_grace must be > 0"),
        ({"AGENTD_QUEUES": "llm,gpu"}, "unknown queue"),
        ({"AGENTD_LLM_CONCURRENCY": "0"}, "llm_concurrency"),
        ({"AGENTD_LLM_RETRY_STATUSES": "429,999"}, "not HTTP statuses"),
        ({"AGENTD_DB_POOL_MIN": "20", "AGENTD_DB_POOL_MAX": "5"}, "db_pool_min"),
        ({"AGENTD_HEARTBEAT_INTERVAL": "90"}, "heartbeat_interval"),
        ({"AGENTD_PORT": "70000"}, "port"),
    ],
)
def test_impossible_values_are_refused_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match=message):
        load_settings()


def test_env_lists_and_durations_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTD_QUEUES", "llm, tool")
    monkeypatch.setenv("AGENTD_LLM_RETRY_STATUSES", "429,503")
    monkeypatch.setenv("AGENTD_EVENT_RETENTION", "P7D")
    s = load_settings()
    assert s.queues == ["llm", "tool"]
    assert s.llm_retry_statuses == [429, 503]
    assert s.event_retention is not None and s.event_retention.days == 7


def test_toml_file_is_read_and_env_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(
        'port = 9001\nllm_concurrency = 7\n[agents.a]\nbase_url = "http://x"\nmodel = "m"\n'
    )
    monkeypatch.setenv("AGENTD_PORT", "9002")
    s = load_settings(cfg)
    assert s.port == 9002 and s.llm_concurrency == 7
    assert s.agents == {"a": {"base_url": "http://x", "model": "m"}}


def test_unknown_toml_key_and_missing_file_are_config_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("lease_margn = 3\n")
    with pytest.raises(ConfigError, match="lease_margn"):
        load_settings(cfg)
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("port = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(broken)


def test_example_config_is_valid() -> None:
    example = Path(__file__).parents[2] / "config" / "agentd.example.toml"
    s = load_settings(example)
    assert "support" in s.agents


def test_redacted_masks_database_password() -> None:
    s = load_settings(database_url="postgresql://app:hunter2@db:5432/agentd")
    assert "hunter2" not in str(s.redacted())

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.engine import approval_edits, loop_state
from agentd.engine.webhooks import backoff
from agentd.errors import ConfigError, ToolArgumentsInvalid
from agentd.settings import WebhookConfig, load_settings


def test_merge_patch_follows_rfc_7396_examples() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    patch = {"a": "z", "c": {"f": None}}
    assert loop_state.merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}}
    assert loop_state.merge_patch({"a": [1]}, {"a": [2, 3]}) == {"a": [2, 3]}
    assert loop_state.merge_patch({"a": 1}, {"a": {"b": None}}) == {"a": {}}
    assert loop_state.merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}
    assert loop_state.merge_patch({"a": 1}, {}) == {"a": 1}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}}  # inputs are not mutated


def test_edited_arguments_errors_name_json_pointers() -> None:
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "integer"}}, "a/b": {}},
        "required": ["items"],
    }
    assert approval_edits.check("t", schema, {"items": [1]}) == {"items": [1]}
    with pytest.raises(ToolArgumentsInvalid) as info:
        approval_edits.check("t", schema, {"items": [1, "x"]})
    assert info.value.details["errors"][0]["path"] == "/items/1"
    with pytest.raises(ToolArgumentsInvalid) as info:
        approval_edits.check("t", schema, {})
    assert info.value.details["errors"][0]["path"] == ""
    assert approval_edits.pointer(["a/b", "~"]) == "/a~1b/~0"
    assert approval_edits.check("t", {"type": 12}, {"x": 1}) == {"x": 1}  # unusable schema
    with pytest.raises(ToolArgumentsInvalid):
        approval_edits.check("t", None, [1])


def test_webhooks_config_rejects_unknown_events_and_duplicate_urls(tmp_path: Path) -> None:
    cfg = tmp_path / "a.toml"
    cfg.write_text(
        '[[webhooks]]\nurl = "http://x/h"\nevents = ["loop.exploded"]\nsecret_env = "S"\n'
    )
    with pytest.raises(ConfigError, match=r"loop\.exploded"):
        load_settings(cfg)
    cfg.write_text(
        '[[webhooks]]\nurl = "http://x/h"\nevents = ["*"]\nsecret_env = "S"\n'
        '[[webhooks]]\nurl = "http://x/h"\nevents = ["loop.failed"]\nsecret_env = "S"\n'
    )
    with pytest.raises(ConfigError, match="same url"):
        load_settings(cfg)
    cfg.write_text('[[webhooks]]\nurl = "ftp://x"\nevents = ["*"]\nsecret_env = "S"\n')
    with pytest.raises(ConfigError):
        load_settings(cfg)
    cfg.write_text(
        '[[webhooks]]\nurl = "https://x/h"\nevents = ["loop.failed"]\nsecret_env = "S"\n'
    )
    (hook,) = load_settings(cfg).webhooks
    assert hook.events == ["loop.failed"] and hook.max_attempts == 10
    assert "webhooks" not in load_settings(cfg).redacted()


def test_backoff_doubles_and_is_capped() -> None:
    c = WebhookConfig(
        url="http://x/h", events=["*"], secret_env="S", retry_base_delay=1, retry_max_delay=5
    )
    assert [backoff(c, n, jitter=0) for n in (1, 2, 3, 4, 9)] == [1, 2, 4, 5, 5]
    assert 0.8 <= backoff(c, 1) <= 1.2


def test_diff_is_the_merge_patch_between_two_states() -> None:
    old = {"a": 1, "b": {"c": 2, "d": 3}, "gone": True, "same": [1]}
    new = {"a": 2, "b": {"c": 2}, "same": [1], "added": {"x": 1}}
    patch = loop_state.diff(old, new)
    assert patch == {"a": 2, "b": {"d": None}, "gone": None, "added": {"x": 1}}
    assert loop_state.merge_patch(old, patch) == new
    assert loop_state.diff(old, old) == {}
    with pytest.raises(ValueError, match="null"):
        loop_state.diff(old, {"a": None})
    with pytest.raises(ValueError, match="null"):
        loop_state.diff({}, {"a": {"b": None}})

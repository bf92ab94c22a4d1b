"""Agent version fingerprints and the upgrade diff (agentd/versions.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from agentd import versions
from agentd.errors import ConfigError
from agentd.registry import AgentVersion, build_registry

BASE: dict[str, Any] = {
    "base_url": "http://llm.local",
    "model": "m1",
    "api_key_env": "SUPPORT_KEY",
    "approval_required": ["shop__refund"],
    "mcps": [
        {
            "name": "billing",
            "url": "http://billing.local/mcp",
            "prefix": "shop",
            "headers": {"Authorization": "Bearer sk-very-secret"},
            "api_token_env": "BILLING_TOKEN",
        }
    ],
}


def version(raw: dict[str, Any], name: str = "support") -> AgentVersion:
    return build_registry({name: raw}, entry_points_too=False).versions()[name]


def changed(**edits: Any) -> dict[str, Any]:
    raw = json.loads(json.dumps(BASE))
    for key, value in edits.items():
        if key.startswith("mcp_"):
            raw["mcps"][0][key.removeprefix("mcp_")] = value
        else:
            raw[key] = value
    return raw


def test_the_fingerprint_is_stable_and_names_the_same_version_in_every_process() -> None:
    a, b = version(BASE), version(json.loads(json.dumps(BASE)))
    assert a.id == b.id and len(a.id) == 16 and a.fingerprint.startswith(a.id)
    code = (
        "import json, sys\n"
        "from agentd.registry import AgentVersion, build_registry\n"
        "raw = json.loads(sys.argv[1])\n"
        "print(build_registry({'support': raw}, entry_points_too=False).version_of('support'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(BASE)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == a.id


@pytest.mark.parametrize(
    "edits",
    [
        {"system_prompt": "Be brief."},
        {"model": "m2"},
        {"base_url": "http://other.local"},
        {"approval_required": ["store__refund"]},
        {"max_steps": 7},
        {"max_cost": "2.5"},
        {"version_policy": "latest"},
        {"mcp_prefix": "store"},
        {"mcp_tools": ["refund"]},
        {"mcp_session": "process"},
        {"mcp_session": "loop"},
    ],
)
def test_every_part_of_the_definition_is_a_new_version(edits: dict[str, Any]) -> None:
    assert version(changed(**edits)).id != version(BASE).id


def test_an_unset_session_mode_is_the_default_auto() -> None:
    assert version(changed(mcp_session="auto")).id == version(BASE).id
    (server,) = version(BASE).definition["mcps"]["servers"]
    assert server["session"] == "auto"


def test_the_same_definition_under_another_name_is_another_version() -> None:
    assert version(BASE, "a").id != version(BASE, "b").id


def test_a_secret_is_never_part_of_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPPORT_KEY", "sk-llm-secret")
    monkeypatch.setenv("BILLING_TOKEN", "sk-billing-secret")
    v = version(BASE)
    text = json.dumps(v.definition)
    assert "secret" not in text
    assert v.definition["mcps"]["servers"][0]["headers"] == ["Authorization"]
    monkeypatch.setenv("SUPPORT_KEY", "sk-rotated")  # a rotated key is the same version
    assert version(BASE).id == v.id


def test_a_bad_version_policy_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        build_registry({"x": changed(version_policy="sometimes")}, entry_points_too=False)
    with pytest.raises(ConfigError):
        build_registry(
            {"x": {"class": "agentd.testing.agents:CalcAgent", "version_policy": "x"}},
            entry_points_too=False,
        )


def test_the_diff_names_renamed_tools_approval_rules_and_limits() -> None:
    old = version(BASE).definition
    new = version(
        changed(mcp_prefix="store", approval_required=["store__refund"], max_steps=9)
    ).definition
    tools = [
        {"server": "billing", "name": "shop__refund", "remote_name": "refund"},
        {"server": "gone", "name": "lookup", "remote_name": "lookup"},
    ]
    d = versions.diff(old, new, tools)
    assert d["tools"] == {
        "renamed": [{"from": "shop__refund", "to": "store__refund"}],
        "removed": ["lookup"],
        "kept": [],
    }
    assert d["prefixes"] == [{"server": "billing", "from": "shop", "to": "store"}]
    assert d["approval_required"] == {"added": ["store__refund"], "removed": ["shop__refund"]}
    assert d["limits"] == {"max_steps": {"from": 50, "to": 9}}
    assert {"approval_required", "limits", "mcps"} <= set(d["changed"])
    assert versions.diff(old, old, tools[:1])["changed"] == []


def test_orphaned_calls_are_those_renamed_or_gone_in_the_target() -> None:
    new = version(changed(mcp_tools=["refund"])).definition
    pending = [
        {"name": "shop__refund", "server": "billing", "remote_name": "refund"},
        {"name": "shop__lookup", "server": "billing", "remote_name": "lookup"},
        {"name": "local", "server": None, "remote_name": "local"},
    ]
    assert versions.orphaned(new, pending) == ["shop__lookup"]
    renamed = version(changed(mcp_prefix="store")).definition
    assert versions.orphaned(renamed, pending[:1]) == ["shop__refund"]

from __future__ import annotations

from agentd import redact


def test_bearer_keys_and_query_params_are_masked() -> None:
    canary = "sk-canary1234567890"
    data = {
        "headers": {"Authorization": f"Bearer {canary}", "x-api-key": canary, "Accept": "x"},
        "url": f"https://h/v1beta/models/m:generateContent?key={canary}&alt=sse",
        "body": {"api_key": canary, "nested": [f"token is Bearer {canary}"]},
    }
    out = redact.scrub(data)
    assert canary not in repr(out)
    assert out["headers"]["Accept"] == "x"
    assert "alt=sse" in out["url"]

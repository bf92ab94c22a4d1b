"""AGENTD_READ_TOKENS in the form docs/api.md documents (a JSON list) and comma-separated:
each token reads, none writes, and the list's literal text is never itself a token."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool
from agentd.errors import ConfigError
from agentd.settings import Settings, load_settings
from agentd.testing import agents

OPERATOR = "read-tokens-operator"


def _app(pool: Pool, database_url: str, settings: Settings) -> FastAPI:
    state = AppState.create(
        settings=settings,
        pool=pool,
        registry=agents.registry(),
        database_url=database_url,
        api_token=OPERATOR,
    )
    return create_app(state)


async def _status(app: FastAPI, token: str, method: str, path: str) -> int:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://agentd.test",
        headers={"Authorization": f"Bearer {token}"},
    ) as c:
        return (await c.request(method, path)).status_code


@pytest.mark.parametrize(
    "env",
    ['["tok-a", "tok-b"]', ' [ "tok-a" ,"tok-b" ] ', "tok-a,tok-b", "tok-a, tok-b,"],
)
async def test_read_tokens_from_the_environment_read_and_never_write(
    monkeypatch: pytest.MonkeyPatch, pool: Pool, database_url: str, env: str
) -> None:
    monkeypatch.setenv("AGENTD_READ_TOKENS", env)
    settings = Settings()
    assert [t.get_secret_value() for t in settings.read_tokens] == ["tok-a", "tok-b"]
    app = _app(pool, database_url, settings)
    try:
        for token in ("tok-a", "tok-b"):
            assert await _status(app, token, "GET", "/v1/loops") == 200
            assert await _status(app, token, "POST", "/v1/loops") == 403
        for literal in (env, env.strip(), '["tok-a"', "tok-a,tok-b"):
            assert await _status(app, literal, "GET", "/v1/loops") == 401
    finally:
        await app.state.admin_hub.close()


@pytest.mark.parametrize("env", ['["tok-a", 5]', '["tok-a"', "[]x"])
def test_a_malformed_json_list_is_a_config_error_not_a_token(
    monkeypatch: pytest.MonkeyPatch, env: str
) -> None:
    monkeypatch.setenv("AGENTD_READ_TOKENS", env)
    with pytest.raises(ConfigError, match="read_tokens"):
        load_settings()

"""No known secret leaves through any face that shows a loop's transcript (issue 42, item 1).

For each kind of secret agentd knows — a provider key (`api_key_env`), an MCP server's bearer
token (`api_token_env`) and credential header, the operator and read tokens, a webhook
signing secret — a model that echoes it (streamed answer, reasoning, tool arguments), a tool
that returns it, a tool that fails with it, a provider error that quotes it and an
approval-gated call that carries it run through real loops. Then every face is read with a
read token: the REST transcript, loop, events, approvals and fleet feed, the loop stream
(live while the answer streams, and replayed), the AG-UI stream, the admin loop pages,
webhook deliveries and an error response quoting what it was sent. None may show the
secret, and the model's next prompt holds the mask (the transcript is stored masked).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid

import httpx
import pytest
from pydantic import SecretStr

from agentd import redact
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry, agent_from_config
from agentd.settings import WebhookConfig
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall
from agentd.testing.fake_mcp import FakeMcpServer
from agentd.testing.webhook_receiver import new_secret

HEX = uuid.uuid4().hex[:16]
OPERATOR = f"operator-token-{HEX}"
READER = f"read-token-{HEX}"
WEBHOOK = new_secret()
KINDS = {
    "provider key": f"sk-proj-provider{HEX}Zq81",
    "mcp bearer token": f"mcp-bearer-{HEX}Yw7",
    "mcp header value": f"hdr-value-{HEX}Xv3",
    "operator token": OPERATOR,
    "read token": READER,
    "webhook secret": WEBHOOK,
}


def _registry(llm: str, mcp: str) -> AgentRegistry:
    reg = AgentRegistry()
    ext = {
        "name": "ext",
        "url": mcp,
        "api_token_env": "T_MCP_TOKEN",
        "headers": {"X-Api-Key": KINDS["mcp header value"]},
        "timeout": 5,
    }
    cfg = {
        "model": "fake-model",
        "base_url": llm,
        "api_key_env": "T_LLM_KEY",
        "streaming": True,
        "max_steps": 6,
        "mcps": [ext],
        "approval_required": ["delete_record"],
    }
    reg.register("echoer", agent_from_config("echoer", cfg))
    return reg


def _script(fake: FakeLLM, secret: str) -> None:
    long_words = " ".join(f"word{i}" for i in range(60))
    fake.add(Rule(match="fail please", reply=Reply(status=400, error_body={"error": secret})))
    fake.add(
        Rule(
            match="approve please",
            reply=Reply(tool_calls=[ToolCall("delete_record", {"record_id": secret})]),
        )
    )
    fake.add(
        Rule(
            match="tool error please",
            reply=Reply(tool_calls=[ToolCall("fail", {"message": f"denied for {secret}"})]),
        )
    )
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(
                content=f"{long_words} the key is {secret} and {long_words}",
                reasoning=f"I should not say {secret}",
                tool_calls=[ToolCall("echo", {"text": f"echo {secret} back"})],
                chunk_size=5,
                chunk_delay=0.005,
            ),
        )
    )
    fake.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content=f"Got {secret}.")))


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_no_face_shows_a_known_secret_from_the_transcript(
    kind: str, pool: Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = KINDS[kind]
    monkeypatch.setenv("T_LLM_KEY", KINDS["provider key"])
    monkeypatch.setenv("T_MCP_TOKEN", KINDS["mcp bearer token"])
    monkeypatch.setenv("T_WEBHOOK", WEBHOOK)
    async with FakeLLM() as fake, FakeMcpServer(token=KINDS["mcp bearer token"]) as mcp:
        _script(fake, secret)
        registry = _registry(fake.base_url, mcp.url)
        hook = WebhookConfig(url="http://127.0.0.1:9/hook", events=["*"], secret_env="T_WEBHOOK")
        settings = fast_settings(
            webhooks=[hook], read_tokens=[SecretStr(READER)], api_token=SecretStr(OPERATOR)
        )
        async with running_engine(pool, database_url, registry, settings=settings) as engine:
            state = AppState.create(
                settings=settings,
                pool=pool,
                registry=registry,
                database_url=database_url,
                api_token=OPERATOR,
                engine=engine,
            )
            app = create_app(state)
            api = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://agentd.test",
                headers={"Authorization": f"Bearer {READER}"},
                timeout=30,
            )
            async with api:
                streamed = await _run_observed(api, engine, "work please")
                ids = [streamed[0]]
                for message in ("fail please", "approve please", "tool error please"):
                    ids.append((await engine.lifecycle.start(agent="echoer", message=message)).id)

                async def settled() -> bool:
                    async with connection(pool) as conn:
                        n = await conn.fetchval(
                            "SELECT count(*) FROM loops WHERE status IN "
                            "('init', 'queued', 'running')"
                        )
                    return n == 0

                await eventually(settled, within=30)
                async with connection(pool) as conn:
                    statuses = dict(await conn.fetch("SELECT id, status FROM loops"))
                assert sorted(statuses.values()) == ["completed", "completed", "failed", "waiting"]
                bodies = {"live stream": streamed[1]}
                bodies |= await _faces(api, ids)
                # A client-visible error quoting what it was sent (an unknown agent's name).
                refused = await api.post(
                    "/v1/loops",
                    json={"agent": f"agent-{secret}", "message": "x"},
                    headers={"Authorization": f"Bearer {OPERATOR}"},
                )
                assert refused.status_code in (404, 422) and redact.MASK in refused.text, (
                    refused.text
                )
                bodies["error response"] = refused.text
                bodies |= await _admin(app, ids)
    leaked = {face: _around(body, secret) for face, body in bodies.items() if secret in body}
    assert sorted(leaked) == [], leaked
    assert redact.MASK in bodies["GET /v1/loops/{id}/messages"]
    # The model's next prompt holds the mask, never the secret.
    follow_ups = [
        json.dumps(r.json) for r in fake.requests if '"role": "tool"' in json.dumps(r.json)
    ]
    assert follow_ups and all(secret not in b for b in follow_ups)
    assert any(redact.MASK in b for b in follow_ups)


async def _run_observed(
    api: httpx.AsyncClient, engine: object, message: str
) -> tuple[uuid.UUID, str]:
    """Start a loop and read its agentd stream live, from before the answer streams."""
    lifecycle = engine.lifecycle  # type: ignore[attr-defined]
    loop = await lifecycle.start(agent="echoer", message=message, observe=True)
    chunks: list[str] = []
    async with api.stream("GET", f"/v1/loops/{loop.id}/stream") as r:
        assert r.status_code == 200
        async for text in r.aiter_text():
            chunks.append(text)
            if re.search(r"event: status\ndata: .*\"(completed|failed)\"", "".join(chunks)):
                break
    live = "".join(chunks)
    assert "event: delta" in live, live[:2000]
    return loop.id, live


async def _faces(api: httpx.AsyncClient, ids: list[uuid.UUID]) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in ("/v1/loops?limit=50", "/v1/events?limit=500", "/v1/webhook-deliveries"):
        r = await api.get(path)
        assert r.status_code == 200, (path, r.text[:300])
        out[f"GET {path}"] = r.text
    for loop_id in ids:
        for suffix in ("", "/messages", "/events", "/approvals"):
            r = await api.get(f"/v1/loops/{loop_id}{suffix}")
            assert r.status_code == 200, (suffix, r.text[:300])
            key = f"GET /v1/loops/{{id}}{suffix}"
            out[key] = out.get(key, "") + r.text
        for name, params, headers in (
            ("loop stream replayed", {}, {"Last-Event-ID": "m0"}),
            ("AG-UI stream", {"protocol": "ag-ui"}, {}),
        ):
            text = await _read_stream(api, f"/v1/loops/{loop_id}/stream", params, headers)
            out[name] = out.get(name, "") + text
    return out


async def _read_stream(
    api: httpx.AsyncClient, path: str, params: dict[str, str], headers: dict[str, str]
) -> str:
    chunks: list[str] = []

    async def read() -> None:
        async with api.stream("GET", path, params=params, headers=headers) as r:
            async for text in r.aiter_text():
                chunks.append(text)

    # A waiting loop's stream stays open: what it sent first is what counts.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(read(), timeout=1.5)
    return "".join(chunks)


async def _admin(app: object, ids: list[uuid.UUID]) -> dict[str, str]:
    out: dict[str, str] = {}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]
        base_url="http://agentd.test",
        follow_redirects=True,
    ) as browser:
        login = await browser.get("/admin/login")
        nonce = re.search(r'name="nonce" value="([^"]+)"', login.text)
        assert nonce is not None
        await browser.post("/admin/login", data={"token": READER, "nonce": nonce[1]})
        for path in ["/admin", "/admin/loops", "/admin/webhooks"] + [
            f"/admin/loops/{i}" for i in ids
        ]:
            r = await browser.get(path)
            assert r.status_code == 200, (path, r.text[:300])
            key = "admin loop page" if path.startswith("/admin/loops/") else f"admin {path}"
            out[key] = out.get(key, "") + r.text
    assert "Got " in out["admin loop page"] or "echo " in out["admin loop page"]
    return out


def _around(body: str, secret: str) -> str:
    at = body.find(secret)
    return body[max(0, at - 200) : at + len(secret) + 50]

"""End to end: a provider error that echoes the key in every encoding at once is stored and
served masked (issue 42, item 2). The per-encoding cases are tests/unit/test_redact_encodings.py;
this one runs a real loop against a fake provider and reads the wire log, the loop and its
transcript back through the API with a read token."""

from __future__ import annotations

import base64
import html
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from agentd import redact
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection
from agentd.registry import AgentRegistry, agent_from_config
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule

KEY = f"sk-proj-{uuid.uuid4().hex}Zq81"
READER = f"read-token-{uuid.uuid4().hex[:12]}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


ENCODED = {
    "tail": KEY[1:],
    "html entity": f"&#x{ord(KEY[0]):x};{KEY[1:]}",
    "html entities": "".join(f"&#{ord(c)};" for c in KEY),
    "utf-7": "+" + _b64(KEY.encode("utf-16-be")).rstrip("=") + "-",
    "utf-16 as text": KEY.encode("utf-16-le").decode("latin-1"),
    "base64 wrapped": "\n".join(
        re.findall(".{1,76}", _b64(b"Authorization: Bearer " + KEY.encode() * 3))
    ),
    "base64 of base64": _b64(_b64(KEY.encode()).encode()),
    "hex": KEY.encode().hex(),
    "HEX": KEY.encode().hex().upper(),
    "base32": base64.b32encode(KEY.encode()).decode(),
    "reversed": KEY[::-1],
    "spaced": " ".join(KEY),
}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _readable(text: str) -> str:
    """Everything a reader could decode `text` to, for the encodings above."""
    out = [text, html.unescape(text), text.replace("\x00", ""), text[::-1], text.replace(" ", "")]
    flat = re.sub(r"\r?\n", "", text)
    for run in re.findall(r"[A-Za-z0-9+/=]{8,}", flat):
        for drop in range(4):
            part = run[drop:].rstrip("=")
            try:
                once = base64.b64decode(part + "=" * (-len(part) % 4))
            except ValueError:
                continue
            out.append(once.decode("latin-1"))
            out.append(once.decode("utf-16-be", "ignore"))
            for inner in re.findall(rb"[A-Za-z0-9+/=]{8,}", once):
                for d in range(4):
                    p = inner[d:].rstrip(b"=")
                    try:
                        out.append(base64.b64decode(p + b"=" * (-len(p) % 4)).decode("latin-1"))
                    except ValueError:
                        continue
    for run in re.findall(r"[0-9a-fA-F]{8,}", text):
        for drop in range(2):
            p = run[drop:]
            out.append(bytes.fromhex(p[: len(p) - len(p) % 2]).decode("latin-1"))
    for run in re.findall(r"[A-Z2-7=]{8,}", text):
        for drop in range(8):
            p = run[drop:].rstrip("=")
            try:
                out.append(base64.b32decode(p[: len(p) - len(p) % 8]).decode("latin-1"))
            except ValueError:
                continue
    return "\n".join(out)


def _leaks(text: str) -> list[str]:
    readable = _readable(text)
    return [KEY[i : i + 12] for i in range(len(KEY) - 11) if KEY[i : i + 12] in readable]


async def _served(
    pool: Pool, database_url: str, reply: Reply, *, streaming: bool, final: str
) -> dict[str, Any]:
    """Run one loop of an agent keyed with KEY against `reply`; read it back with a read
    token once it reached status `final`."""
    async with FakeLLM() as fake:
        fake.add(Rule(match="go", reply=reply))
        registry = AgentRegistry()
        cfg = {
            "model": "m",
            "base_url": fake.base_url,
            "api_key_env": "ENC_LLM_KEY",
            "streaming": streaming,
        }
        registry.register("enc", agent_from_config("enc", cfg))
        settings = fast_settings(read_tokens=[SecretStr(READER)])
        async with running_engine(pool, database_url, registry, settings=settings) as engine:
            loop = await engine.lifecycle.start(agent="enc", message="go")

            async def ended() -> bool:
                async with connection(pool) as conn:
                    status = await conn.fetchval("SELECT status FROM loops WHERE id = $1", loop.id)
                return status == final

            await eventually(ended, within=30)
            state = AppState.create(
                settings=settings,
                pool=pool,
                registry=registry,
                database_url=database_url,
                api_token="operator-token-for-encodings",
                engine=engine,
            )
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=create_app(state)),
                base_url="http://agentd.test",
                headers={"Authorization": f"Bearer {READER}"},
            ) as api:
                return {
                    path: (await api.get(f"/v1/loops/{loop.id}{path}")).json()
                    for path in ("", "/events", "/messages")
                }


def _assert_masked(served: dict[str, Any]) -> None:
    wire = [e for e in served["/events"]["items"] if e.get("response_data") or e.get("status")]
    assert wire, served["/events"]
    texts = "\n".join(_strings(served["/events"]))
    assert "tail:" in texts and "spaced:" in texts  # the body was stored, around the masks
    assert texts.count(redact.MASK) >= len(ENCODED)
    leaked = {path: _leaks("\n".join(_strings(v))) for path, v in served.items()}
    assert {k: v for k, v in leaked.items() if v} == {}
    assert json.dumps(served).count(KEY) == 0


async def test_a_key_echoed_in_every_encoding_is_served_masked(
    pool: Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENC_LLM_KEY", KEY)
    body = "\n".join(f"{name}: {enc} ;" for name, enc in ENCODED.items())
    assert all(_leaks(enc) for enc in ENCODED.values())  # each case exposes the key unmasked
    reply = Reply(status=401, error_body=body)
    _assert_masked(await _served(pool, database_url, reply, streaming=False, final="failed"))


async def test_a_streamed_answer_echoing_the_key_is_served_masked(
    pool: Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client replaces only the call's literal key in a streamed body; the encoded
    # forms are masked where the wire log is stored (store/events.py), and must be.
    monkeypatch.setenv("ENC_LLM_KEY", KEY)
    body = "\n".join(f"{name}: {enc} ;" for name, enc in ENCODED.items())
    reply = Reply(content=f"{body}\nliteral: {KEY} ;", chunk_size=40)
    _assert_masked(await _served(pool, database_url, reply, streaming=True, final="completed"))

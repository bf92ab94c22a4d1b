"""A known secret echoed back in any encoding never survives into a stored event.

The property: for a random secret, put in a random place of a provider-like body in a
random form — raw, JSON-escaped (any subset of its characters), percent-encoded, JSON
inside JSON, base64 at any alignment, Basic credentials, split across SSE events — the
stored event holds nothing that decodes to the secret. The checker decodes independently
of agentd.redact (json.loads of the SSE events, urllib's unquote, base64 at every offset).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import string
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd import redact
from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db.pool import Pool, connection, transaction
from agentd.engine.lifecycle import Lifecycle
from agentd.registry import AgentRegistry, agent_from_config
from agentd.store import events
from agentd.store.models import NewEvent
from agentd.testing import factories
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule

SECRET_CHARS = string.ascii_letters + string.digits + "-_"

# --- the checker: every text a reader can decode a stored text to ---------------------------


_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _json_unescape(s: str) -> str:
    """One level of JSON string escapes, left to right as a JSON decoder reads them."""

    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        return chr(int(esc[1:], 16)) if len(esc) == 5 else _SIMPLE.get(esc, esc)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, s, flags=re.S)


def _sse_assembled(s: str) -> Iterator[str]:
    """Per key, the string values of every `data:` event concatenated (a client's view)."""
    by_key: dict[str, list[str]] = {}

    def walk(v: Any, key: str) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, k)
        elif isinstance(v, list):
            for x in v:
                walk(x, key)
        elif isinstance(v, str):
            by_key.setdefault(key, []).append(v)

    for line in s.splitlines():
        if line.startswith("data:"):
            try:
                walk(json.loads(line[5:]), "")
            except ValueError:
                continue
    for parts in by_key.values():
        yield "".join(parts)


def _base64_decodings(s: str) -> Iterator[str]:
    for run in re.findall(r"[A-Za-z0-9+/=_-]{8,}", s):
        for drop in range(4):
            tail = run[drop:].rstrip("=")
            for alt in (None, b"-_"):
                try:
                    raw = base64.b64decode(tail + "=" * (-len(tail) % 4), altchars=alt)
                except ValueError:
                    continue
                yield raw.decode("latin-1")


def decodings(stored: str) -> set[str]:
    forms = {stored, *_sse_assembled(stored)}
    for _ in range(3):
        forms |= {_json_unescape(f) for f in forms} | {urllib.parse.unquote(f) for f in forms}
        forms |= {a for f in list(forms) for a in _sse_assembled(f)}
    return forms | {d for f in forms for d in _base64_decodings(f)}


def exposes(stored: str, secret: str) -> bool:
    return any(secret in form for form in decodings(stored))


# --- the exposures -----------------------------------------------------------------------------


@st.composite
def json_escaped(draw: st.DrawFn, s: str) -> str:
    which = draw(st.lists(st.booleans(), min_size=len(s), max_size=len(s)))
    upper = draw(st.booleans())
    return "".join(
        (f"\\u{ord(c):04X}" if upper else f"\\u{ord(c):04x}") if w else c
        for c, w in zip(s, which, strict=True)
    )


@st.composite
def percent_encoded(draw: st.DrawFn, s: str) -> str:
    which = draw(st.lists(st.booleans(), min_size=len(s), max_size=len(s)))
    return "".join(f"%{ord(c):02X}" if w else c for c, w in zip(s, which, strict=True))


def sse_body(pieces: list[str], dialect: str) -> str:
    events_ = []
    for p in pieces:  # `p` is already JSON string content (escaped as drawn)
        if dialect == "open_ai":
            events_.append('{"choices":[{"index":0,"delta":{"content":"' + p + '"}}]}')
        else:
            events_.append(
                '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
                '"text":"' + p + '"}}'
            )
    return "".join(f"data: {e}\n\n" for e in events_) + "data: [DONE]\n\n"


@st.composite
def exposure(draw: st.DrawFn, secret: str) -> str:
    """A provider-like text holding `secret` in some encoding, somewhere."""
    # Words around it (a key's shape is recognised as a token of its own: "task-…" is not one).
    before = draw(st.text(alphabet=string.ascii_letters + " .,:", max_size=30)) + " "
    after = " " + draw(st.text(alphabet=string.ascii_letters + " .,:", max_size=30))
    kind = draw(
        st.sampled_from(
            ["raw", "json", "percent", "percent+json", "json+json", "base64", "basic", "sse"]
        )
    )
    if kind == "raw":
        enc = secret
    elif kind == "json":
        enc = draw(json_escaped(secret))
    elif kind == "percent":
        return f"https://provider.test/v1?{before}=1&pass={draw(percent_encoded(secret))}"
    elif kind == "percent+json":
        enc = draw(json_escaped(draw(percent_encoded(secret))))
    elif kind == "json+json":
        inner = json.dumps({"message": f"{before} {draw(json_escaped(secret))} {after}"})
        return json.dumps({"error": {"detail": inner}})
    elif kind == "base64":
        pre = draw(st.binary(max_size=5))
        post = draw(st.binary(max_size=5))
        urlsafe = draw(st.booleans())
        blob = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(
            pre + secret.encode() + post
        )
        enc = blob.decode()
    elif kind == "basic":
        cred = draw(st.sampled_from([f"user:{secret}", f"{secret}:x", f"{secret}:"]))
        enc = "Basic " + base64.b64encode(cred.encode()).decode()
    else:
        cuts = sorted(
            draw(st.lists(st.integers(1, len(secret) - 1), min_size=1, max_size=3, unique=True))
        )
        parts = [secret[a:b] for a, b in zip([0, *cuts], [*cuts, len(secret)], strict=True)]
        parts[0] = before + parts[0]
        parts[-1] = parts[-1] + after
        escaped = [draw(json_escaped(p)) if draw(st.booleans()) else p for p in parts]
        return sse_body(escaped, draw(st.sampled_from(["open_ai", "anthropic"])))
    message = f"{before} bad key {enc} {after}"  # `enc` is JSON string content already
    return '{"error":{"message":"' + message + '","type":"invalid_request_error"}}'


secrets_ = st.text(alphabet=SECRET_CHARS, min_size=12, max_size=40)


def _event(body: str, loop_id: uuid.UUID | None = None) -> NewEvent:
    return NewEvent(
        name="llm.request",
        loop_id=loop_id,
        http_method="POST",
        url=body if body.startswith("https://") else "https://provider.test/v1/chat",
        status=400,
        request_data={"headers": {}, "body": {"messages": [{"content": body}]}},
        response_data={"headers": {}, "body": body},
        log=body,
    )


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def test_the_checker_sees_every_exposure_unredacted() -> None:
    """The checker is able to fail: each raw exposure decodes to its secret."""

    @given(data=st.data(), secret=secrets_)
    @settings(max_examples=200, deadline=None)
    def check(data: st.DataObject, secret: str) -> None:
        assert exposes(data.draw(exposure(secret)), secret)

    check()


@given(data=st.data(), secret=secrets_)
@settings(max_examples=400, deadline=None)
def test_a_known_secret_in_any_encoding_never_reaches_a_stored_column(
    data: st.DataObject, secret: str
) -> None:
    redact.current().remember(secret)
    body = data.draw(exposure(secret))
    columns = events.columns([_event(body)])  # exactly what event_insert_many stores
    for text in _strings([c[0] for c in columns]):
        assert not exposes(text, secret), text


@given(data=st.data(), secret=secrets_)
@settings(max_examples=150, deadline=None)
def test_an_unknown_provider_key_in_any_encoding_is_masked_by_its_shape(
    data: st.DataObject, secret: str
) -> None:
    key = f"sk-{secret}"  # the shape of a provider key agentd was never told about
    body = data.draw(exposure(key))
    (stored,) = _strings(redact.scrub({"body": body}))
    assert not exposes(stored, key), stored


@given(data=st.data(), secret=secrets_)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
async def test_stored_events_read_back_from_postgres_hold_no_decodable_secret(
    pool: Pool, data: st.DataObject, secret: str
) -> None:
    redact.current().remember(secret)
    body = data.draw(exposure(secret))
    async with transaction(pool) as conn:
        loop = await factories.loop(conn, status="failed")
        await events.insert_many(conn, [_event(body, loop.id)])
    async with connection(pool) as conn:
        (row,) = await events.list_(conn, loop_id=loop.id)
    for text in _strings(json.loads(json.dumps(dataclasses.asdict(row), default=str))):
        assert not exposes(text, secret), text


async def test_a_provider_echoing_its_key_json_escaped_is_masked_for_a_read_only_token(
    pool: Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reported leak: a 400 body `bad key \\u0073k-CANARY…` stored raw in `llm.request`,
    readable with a read-only token. Also a streamed answer splitting the key in two."""
    key = f"sk-CANARY-{uuid.uuid4().hex}"
    escaped = "\\u0073" + key[1:]
    monkeypatch.setenv("CANARY_KEY", key)
    registry = AgentRegistry()
    async with FakeLLM() as fake:
        registry.register(
            "echo",
            agent_from_config(
                "echo",
                {"model": "m", "base_url": fake.base_url, "api_key_env": "CANARY_KEY"},
            ),
        )
        registry.register(
            "stream",
            agent_from_config(
                "stream",
                {
                    "model": "m",
                    "base_url": fake.base_url,
                    "api_key_env": "CANARY_KEY",
                    "streaming": True,
                },
            ),
        )
        fake.add(
            Rule(
                match="fail",
                reply=Reply(
                    status=400,
                    error_body=json.dumps({"error": {"message": "bad key X"}}).replace(
                        "X", escaped
                    ),
                ),
            )
        )
        fake.add(Rule(match="echo", reply=Reply(content=f"your key: {key}", chunk_size=7)))
        settings = fast_settings(read_tokens=["read-only-token-for-this-test"])
        lifecycle = Lifecycle(pool, registry, settings)
        async with running_engine(pool, database_url, registry, settings=settings):
            failed = await lifecycle.start(agent="echo", message="fail")
            echoed = await lifecycle.start(agent="stream", message="echo")

            async def settled() -> bool:
                async with connection(pool) as conn:
                    n = await conn.fetchval(
                        "SELECT count(*) FROM loops WHERE status IN ('queued','running')"
                    )
                return n == 0

            await eventually(settled, within=30)
        state = AppState(
            settings=settings,
            pool=pool,
            registry=registry,
            lifecycle=lifecycle,
            database_url=database_url,
            api_token=f"operator-{uuid.uuid4().hex}",
        )
        transport = httpx.ASGITransport(app=create_app(state))
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://agentd.test",
            headers={"Authorization": "Bearer read-only-token-for-this-test"},
        ) as http:
            bodies = {}
            for loop in (failed, echoed):
                r = await http.get(f"/v1/loops/{loop.id}/events")
                assert r.status_code == 200, r.text
                bodies[loop.id] = r.json()["items"]
    wire = [e for e in bodies[failed.id] if e["name"] == "llm.request"]
    assert wire and any(e.get("status") == 400 for e in wire)
    assert "bad key [REDACTED]" in json.dumps(wire)
    assert any("data:" in json.dumps(e) for e in bodies[echoed.id])  # the SSE body is there
    for items in bodies.values():
        for text in _strings(items):
            assert not exposes(text, key), text

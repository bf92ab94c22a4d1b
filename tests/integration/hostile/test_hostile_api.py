"""Hostile API clients: random bodies, wrong types, huge and deeply nested JSON, invalid
UTF-8 and NUL bytes, against every route of the full app (and the MCP mounts). Every answer
is a documented one — a 2xx, or a 4xx `application/problem+json` (JSON-RPC errors on the MCP
mounts) — never a 500, a crash or a hang."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import routing
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.api.state import AppState
from agentd.app import create_app
from agentd.db import pool as dbpool
from agentd.testing import agents
from agentd.testing.engine import fast_settings

TOKEN = "hostile-operator-token"
MAX_BODY = 64 * 1024
HOSTILE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Harness:
    """The full app on its own event loop, so synchronous hypothesis tests can drive it."""

    def __init__(self, database_url: str, **overrides: Any) -> None:
        self.runner = asyncio.Runner()
        self.pool = self.runner.run(dbpool.create_pool(database_url, min_size=1, max_size=4))
        registry = agents.registry()
        s = fast_settings(max_body_bytes=MAX_BODY, read_tokens=["hostile-reader"], **overrides)
        state = AppState.create(
            settings=s,
            pool=self.pool,
            registry=registry,
            database_url=database_url,
            api_token=TOKEN,
        )
        self.app = create_app(state)
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app, raise_app_exceptions=False),
            base_url="http://agentd.test",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        loop = self.runner.run(
            state.lifecycle.start(agent="calc", message="hi", state={"llm": "http://x"})
        )
        self.loop_id = str(loop.id)

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            async with asyncio.timeout(10):  # a hang is a failure too
                return await self.client.request(method, path, **kw)

        return self.runner.run(go())

    def close(self) -> None:
        self.runner.run(self.client.aclose())
        self.runner.run(self.pool.close())
        self.runner.close()


@pytest.fixture
def harness(database_url: str) -> Iterator[Harness]:
    h = Harness(database_url)
    try:
        yield h
    finally:
        h.close()


def routes(harness: Harness) -> list[tuple[str, str]]:
    # iter_route_contexts: FastAPI nests included routers, so app.routes alone held only
    # /openapi.json and /docs and this fuzzed two routes.
    out = []
    for ctx in routing.iter_route_contexts(harness.app.routes):
        if isinstance(ctx.original_route, APIRoute) and not ctx.path.endswith("/stream"):
            out += [
                (m, ctx.path) for m in sorted(ctx.methods or ()) if m in ("GET", "POST", "DELETE")
            ]
    assert len(out) > 30, out
    return out


def assert_documented(r: httpx.Response, what: str) -> None:
    assert r.status_code < 500, (what, r.status_code, r.text[:500])
    if r.status_code >= 400 and r.headers["content-type"].startswith("text/html"):
        assert " /admin" in what, what  # the admin's own refusal pages (docs/admin.md)
        return
    if r.status_code >= 400:
        assert r.headers["content-type"].startswith("application/problem+json"), (what, r.text)
        body = r.json()
        assert body["status"] == r.status_code and body["type"] and body["detail"], body


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
field_names = st.sampled_from(
    ["agent", "message", "state", "subject", "content", "reason", "from", "observed", "cron",
     "name", "max_tokens_total", "concurrency_key", "message_id", "x"]
)  # fmt: skip
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(field_names, json_values, max_size=5).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.sampled_from(
        [
            b"", b"{", b"null", b'{"agent": "calc", "message": "a\\u0000b"}',
            b'{"agent": "calc", "message": "\\ud800"}', b'{"agent": "calc", "message": "x",'
            b' "state": {"n": NaN}}', b'{"agent": "calc", "message": "hi", "state": [1]}',
            b"\xff\xfe{}", b'{"agent": "\xff", "message": "hi"}', b'{"content": 12}',
            b'{"agent": "calc", "message": "hi", "state": {"a": 1e999}}',
        ]
    ),
)  # fmt: skip
path_ids = st.sampled_from(["LOOP", str(uuid.uuid4()), "not-a-uuid", "0", "-1", "%00", "9" * 40])


def fill(path: str, harness: Harness, value: str) -> str:
    value = harness.loop_id if value == "LOOP" else value
    return re.sub(r"\{[^}]+\}", value, path)


@HOSTILE
@given(data=st.data())
def test_every_route_answers_hostile_bodies_with_a_documented_error(
    harness: Harness, data: st.DataObject
) -> None:
    method, path = data.draw(st.sampled_from(routes(harness)))
    url = fill(path, harness, data.draw(path_ids))
    body = data.draw(bodies) if method != "GET" else None
    ctype = data.draw(st.sampled_from(["application/json", "text/plain", "application/x-www-form"]))
    query = data.draw(
        st.dictionaries(
            st.sampled_from(["limit", "cursor", "status", "agent", "after", "include_hidden"]),
            st.text(max_size=12) | st.sampled_from(["-1", "0", "10000000000", "%ff"]),
            max_size=3,
        )
    )
    r = harness.request(method, url, content=body, params=query, headers={"content-type": ctype})
    assert_documented(r, f"{method} {url} {body!r:.200}")


@pytest.mark.parametrize("depth", [100, 5_000, 50_000])
def test_deeply_nested_json_is_a_4xx(harness: Harness, depth: int) -> None:
    nested = '{"agent": "calc", "message": "hi", "state": {"a": ' + "[" * depth + "]" * depth + "}}"
    r = harness.request("POST", "/v1/loops", content=nested.encode()[: MAX_BODY - 1])
    assert_documented(r, f"depth {depth}")


def test_a_body_over_the_limit_is_413_even_without_content_length(harness: Harness) -> None:
    huge = json.dumps({"agent": "calc", "message": "x" * (MAX_BODY * 2)}).encode()
    r = harness.request("POST", "/v1/loops", content=huge)
    assert r.status_code == 413, r.text
    assert_documented(r, "huge")

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(4):
            yield b"x" * MAX_BODY

    r = harness.request("POST", "/v1/loops", content=chunks())
    assert r.status_code == 413 and r.json()["max_body_bytes"] == MAX_BODY


def test_nul_bytes_and_bad_utf8_are_refused_and_change_nothing(harness: Harness) -> None:
    before = harness.request("GET", "/v1/loops").json()["items"]
    for raw in (
        b'{"agent": "calc", "message": "a\\u0000b"}',
        b'{"agent": "calc", "message": "\\ud800"}',
        b'{"agent": "calc", "message": "hi", "state": {"k\\u0000": 1}}',
        b'{"agent": "calc", "message": "\xff\xfe"}',
    ):
        r = harness.request("POST", "/v1/loops", content=raw)
        assert 400 <= r.status_code < 500, (raw, r.status_code, r.text)
        assert_documented(r, repr(raw))
    assert harness.request("GET", "/v1/loops").json()["items"] == before


def test_hostile_values_in_path_and_query_are_4xx(harness: Harness) -> None:
    for url in (
        "/v1/loops/%00",
        "/v1/loops/" + "a" * 5000,
        "/v1/loops?limit=-5",
        "/v1/loops?limit=99999999999999999999",
        "/v1/loops?cursor=%ff%fe",
        "/v1/loops?cursor=" + "A" * 3000,
        "/v1/loops?status=__nope__",
        "/v1/tool-calls/99999999999999999999999/approve",
    ):
        method = "POST" if url.endswith("approve") else "GET"
        assert_documented(harness.request(method, url, content=b"{}"), url)

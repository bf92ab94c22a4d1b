from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from agentd.db.pool import Pool, connection
from agentd.engine import loop_state
from agentd.registry import AgentRegistry
from agentd.testing import factories
from agentd.testing.engine import eventually, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule

MERGE = {"Content-Type": "application/merge-patch+json"}


async def _loop(pool: Pool, status: str = "paused", state: dict | None = None) -> str:
    async with connection(pool) as conn:
        row = await factories.loop(conn, status=status, state=state or {})
    return str(row.id)


def _patch(client: httpx.AsyncClient, lid: str, body: object, etag: str | None = None):
    headers = dict(MERGE)
    if etag is not None:
        headers["If-Match"] = etag
    return client.patch(f"/v1/loops/{lid}/state", content=json.dumps(body), headers=headers)


async def test_merge_patch_with_the_current_etag_applies_and_bumps_the_version(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    lid = await _loop(pool, state={"plan": "pro", "limits": {"a": 1, "b": 2}, "drop": True})
    got = await client.get(f"/v1/loops/{lid}/state")
    assert got.status_code == 200 and got.headers["etag"] == '"1"'
    assert got.json() == {
        "state": {"plan": "pro", "limits": {"a": 1, "b": 2}, "drop": True},
        "version": 1,
    }
    r = await _patch(client, lid, {"limits": {"b": None, "c": 3}, "drop": None, "new": [1]}, '"1"')
    assert r.status_code == 200, r.text
    assert r.headers["etag"] == '"2"'
    assert r.json() == {
        "state": {"plan": "pro", "limits": {"a": 1, "c": 3}, "new": [1]},
        "version": 2,
    }
    loop = (await client.get(f"/v1/loops/{lid}")).json()
    assert loop["state"] == r.json()["state"] and loop["state_version"] == 2
    (ev,) = [
        e
        for e in (await client.get(f"/v1/loops/{lid}/events")).json()["items"]
        if e["name"] == "loop.state_changed"
    ]
    logged = json.loads(ev["log"])
    assert logged["from_version"] == 1 and logged["to_version"] == 2
    assert logged["patch"] == {"limits": {"b": None, "c": 3}, "drop": None, "new": [1]}


async def test_a_stale_etag_is_412_and_changes_nothing(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    lid = await _loop(pool, state={"n": 0})
    assert (await _patch(client, lid, {"n": 1}, '"1"')).status_code == 200
    lost = await _patch(client, lid, {"n": 99}, '"1"')  # a second writer that read version 1
    assert lost.status_code == 412
    assert lost.json()["type"].endswith("/precondition-failed")
    assert lost.json()["current_version"] == 2
    state = (await client.get(f"/v1/loops/{lid}/state")).json()
    assert state == {"state": {"n": 1}, "version": 2}


async def test_concurrent_writers_on_one_version_exactly_one_wins(pool: Pool) -> None:
    lid = await _loop(pool, state={})
    import uuid

    results = await asyncio.gather(
        *(loop_state.patch(pool, uuid.UUID(lid), {f"k{i}": i}, if_match=1) for i in range(5)),
        return_exceptions=True,
    )
    wins = [r for r in results if not isinstance(r, BaseException)]
    assert len(wins) == 1
    assert all(type(r).__name__ == "PreconditionFailed" for r in results if r not in wins)
    ((loop, changed),) = wins
    assert changed and loop.state_version == 2 and len(loop.state) == 1


async def test_without_if_match_is_428_and_star_applies_to_any_version(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    lid = await _loop(pool)
    r = await _patch(client, lid, {"a": 1})
    assert r.status_code == 428 and r.json()["type"].endswith("/precondition-required")
    star = await _patch(client, lid, {"a": 1}, "*")
    assert star.status_code == 200 and star.json()["version"] == 2
    weak = await _patch(client, lid, {"a": 2}, 'W/"2"')
    assert weak.status_code == 412  # RFC 9110: a weak tag never matches a strong compare


@pytest.mark.parametrize(
    ("if_match", "status"),
    [
        ('"2"', 200),
        ('"1", "2"', 200),  # a list matches when any member does
        ('"2","7"', 200),
        ('W/"2", "2"', 200),
        (',, "2" ,', 200),  # empty list elements are allowed (RFC 9110 §5.6.1)
        ('W/"2"', 412),  # weak: never matches under If-Match's strong comparison
        ('W/"1", W/"2"', 412),
        ('"02"', 412),  # opaque: only the exact text of our ETag names version 2
        ('"+2"', 412),
        ('" 2"', 400),  # a space is not an etagc
        ('"1", "3"', 412),
        ('"x,2"', 412),  # a comma inside a tag is part of the opaque string
        ('"abc"', 412),
        ('"\uff12"', 412),  # fullwidth digit (obs-text on the wire): never our tag
        ("2", 400),  # unquoted: not an entity-tag
        ('"2', 400),
        ('*, "2"', 400),
        ('"2" "3"', 400),
    ],
)
async def test_if_match_follows_rfc_9110_strong_comparison(
    client: httpx.AsyncClient, pool: Pool, if_match: str, status: int
) -> None:
    lid = await _loop(pool, state={"n": 0})
    assert (await _patch(client, lid, {"n": 1}, "*")).json()["version"] == 2
    try:
        r = await _patch(client, lid, {"n": 5}, if_match)
    except UnicodeEncodeError:  # httpx refuses non-latin-1 header values itself
        r = await client.patch(
            f"/v1/loops/{lid}/state",
            content=b'{"n": 5}',
            headers=[(b"If-Match", if_match.encode()), (b"Content-Type", b"application/json")],
        )
    assert r.status_code == status, r.text
    after = (await client.get(f"/v1/loops/{lid}/state")).json()
    assert after == (
        {"state": {"n": 5}, "version": 3} if status == 200 else {"state": {"n": 1}, "version": 2}
    )
    if status == 412:
        assert (
            r.json()["type"].endswith("/precondition-failed") and r.json()["current_version"] == 2
        )


async def test_several_if_match_fields_are_one_list(client: httpx.AsyncClient, pool: Pool) -> None:
    lid = await _loop(pool)
    r = await client.patch(
        f"/v1/loops/{lid}/state",
        content=b'{"a": 1}',
        headers=[
            (b"If-Match", b'"7"'),
            (b"If-Match", b'"1"'),
            (b"Content-Type", MERGE["Content-Type"].encode()),
        ],
    )
    assert r.status_code == 200 and r.json()["version"] == 2


async def test_a_missing_loop_is_404_before_any_precondition(
    client: httpx.AsyncClient,
) -> None:
    r = await _patch(client, "00000000-0000-0000-0000-000000000000", {}, 'W/"1"')
    assert r.status_code == 404


async def test_the_state_advertises_merge_patch_in_accept_patch(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    lid = await _loop(pool)
    got = await client.get(f"/v1/loops/{lid}/state")
    assert got.headers["accept-patch"] == "application/merge-patch+json"
    head = await client.head(f"/v1/loops/{lid}/state")
    assert head.headers["accept-patch"] == "application/merge-patch+json"
    opts = await client.options(f"/v1/loops/{lid}/state")
    assert opts.status_code == 204
    assert opts.headers["accept-patch"] == "application/merge-patch+json"
    assert set(opts.headers["allow"].split(", ")) == {"GET", "HEAD", "OPTIONS", "PATCH"}
    # Another JSON patch format is refused, naming the one it takes; nothing changes.
    other = await client.patch(
        f"/v1/loops/{lid}/state",
        content=b'[{"op": "add", "path": "/a", "value": 1}]',
        headers={"Content-Type": "application/json-patch+json", "If-Match": '"1"'},
    )
    assert other.status_code == 415, other.text
    assert other.headers["content-type"] == "application/problem+json"
    assert other.headers["accept-patch"] == "application/merge-patch+json"
    assert (await client.get(f"/v1/loops/{lid}/state")).json()["version"] == 1
    # A merge patch declared beside application/json (a shell alias adds its own field).
    both = await client.patch(
        f"/v1/loops/{lid}/state",
        content=b'{"plan": "pro"}',
        headers=[
            ("Content-Type", "application/json"),
            ("Content-Type", "application/merge-patch+json"),
            ("If-Match", '"1"'),
        ],
    )
    assert both.status_code == 200, both.text
    assert both.json()["state"]["plan"] == "pro"
    # A method the resource lacks: 405 naming all of them, OPTIONS included.
    put = await client.put(f"/v1/loops/{lid}/state", json={})
    assert put.status_code == 405
    assert set(put.headers["allow"].split(", ")) == {"GET", "HEAD", "OPTIONS", "PATCH"}


@pytest.mark.parametrize("status", ["queued", "running"])
async def test_patching_while_a_turn_may_read_the_state_is_409(
    client: httpx.AsyncClient, pool: Pool, status: str
) -> None:
    lid = await _loop(pool, status=status, state={"a": 1})
    r = await _patch(client, lid, {"a": 2}, '"1"')
    assert r.status_code == 409 and r.json()["current_status"] == status
    assert (await client.get(f"/v1/loops/{lid}/state")).json()["state"] == {"a": 1}


@pytest.mark.parametrize("status", ["waiting", "completed", "failed", "stopped", "init"])
async def test_patching_at_rest_or_waiting_is_allowed(
    client: httpx.AsyncClient, pool: Pool, status: str
) -> None:
    lid = await _loop(pool, status=status)
    assert (await _patch(client, lid, {"x": 1}, '"1"')).status_code == 200


async def test_bad_patches_are_4xx(client: httpx.AsyncClient, pool: Pool) -> None:
    lid = await _loop(pool)
    assert (await _patch(client, lid, [1, 2], '"1"')).status_code == 422
    assert (await _patch(client, lid, "x", '"1"')).status_code == 422
    nul = await _patch(client, lid, {"a": "x\u0000"}, '"1"')
    assert nul.status_code == 422
    broken = await client.patch(
        f"/v1/loops/{lid}/state", content=b"{not json", headers={**MERGE, "If-Match": '"1"'}
    )
    assert broken.status_code == 400
    # Any Content-Type is read as JSON, as for every /v1 body (curl -d sends a form type).
    text = await client.patch(
        f"/v1/loops/{lid}/state",
        content=b'{"via": "form type"}',
        headers={"Content-Type": "application/x-www-form-urlencoded", "If-Match": '"1"'},
    )
    assert text.status_code == 200 and text.json()["version"] == 2
    missing = await _patch(client, "00000000-0000-0000-0000-000000000000", {}, '"1"')
    assert missing.status_code == 404
    assert (await client.get(f"/v1/loops/{lid}/state")).json()["version"] == 2


async def test_a_no_op_patch_keeps_the_version_and_records_nothing(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    lid = await _loop(pool, state={"a": 1})
    r = await _patch(client, lid, {"a": 1, "gone": None}, '"1"')
    assert r.status_code == 200 and r.json()["version"] == 1
    names = [e["name"] for e in (await client.get(f"/v1/loops/{lid}/events")).json()["items"]]
    assert "loop.state_changed" not in names


async def test_a_read_only_token_can_read_the_state_but_not_patch_it(
    app,
    make_client,
    pool: Pool,
) -> None:
    lid = await _loop(pool, state={"a": 1})
    async with make_client(app, "read-only-token-for-tests") as reader:
        assert (await reader.get(f"/v1/loops/{lid}/state")).status_code == 200
        assert (await _patch(reader, lid, {"a": 2}, '"1"')).status_code == 403
    async with make_client(app, None) as anonymous:
        assert (await anonymous.get(f"/v1/loops/{lid}/state")).status_code == 401


async def test_the_next_turn_reads_the_patched_state(
    client: httpx.AsyncClient,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
) -> None:
    # The calc agent's base_url is read from state["llm"]: a patch re-points the next turn.
    async with FakeLLM() as second:
        fake_llm.add(Rule(match=lambda last: True, reply=Reply(content="first")))
        second.add(Rule(match=lambda last: True, reply=Reply(content="second")))
        async with running_engine(pool, database_url, registry):
            r = await client.post(
                "/v1/loops",
                json={"agent": "calc", "message": "hi", "state": {"llm": fake_llm.base_url}},
            )
            lid = r.json()["id"]
            await eventually(lambda: _status_is(client, lid, "completed"))
            etag = (await client.get(f"/v1/loops/{lid}/state")).headers["etag"]
            p = await _patch(client, lid, {"llm": second.base_url}, etag)
            assert p.status_code == 200
            r = await client.post(f"/v1/loops/{lid}/messages", json={"content": "again"})
            assert r.status_code == 200
            await eventually(lambda: _status_is(client, lid, "completed"))
        assert len(second.requests) == 1
        msgs = (await client.get(f"/v1/loops/{lid}/messages")).json()["items"]
        assert [m["content"] for m in msgs if m["role"] == "assistant"] == ["first", "second"]


async def _status_is(client: httpx.AsyncClient, lid: str, status: str) -> bool:
    return (await client.get(f"/v1/loops/{lid}")).json()["status"] == status


async def test_any_write_of_state_bumps_the_version_so_if_match_sees_it(
    client: httpx.AsyncClient, pool: Pool
) -> None:
    lid = await _loop(pool, state={"a": 1})
    async with connection(pool) as conn:
        # Another writer (the engine, an older release) that knows nothing of versions.
        await conn.execute("UPDATE loops SET state = '{\"a\": 2}' WHERE id = $1::uuid", lid)
        await conn.execute("UPDATE loops SET state = '{\"a\": 2}' WHERE id = $1::uuid", lid)
    assert (await client.get(f"/v1/loops/{lid}/state")).json() == {"state": {"a": 2}, "version": 2}
    assert (await _patch(client, lid, {"a": 3}, '"1"')).status_code == 412


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": -Infinity}',
        b'{"a": 1e400}',
        b'{"a": "\\ud800"}',
        b'{"a\\u0000": 1}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
    ids=["nan", "inf", "-inf", "1e400", "surrogate", "nul-key", "deep-list", "deep-in-object"],
)
async def test_hostile_patch_bodies_are_422_and_change_nothing(
    client: httpx.AsyncClient, pool: Pool, raw: bytes
) -> None:
    """The raw-body route goes through the API's one set of input rules (api/hygiene)."""
    lid = await _loop(pool, state={"keep": True})
    r = await client.patch(
        f"/v1/loops/{lid}/state", content=raw, headers={**MERGE, "If-Match": '"1"'}
    )
    assert r.status_code == 422, (r.status_code, r.text[:200])
    assert r.headers["content-type"].startswith("application/problem+json")
    state = (await client.get(f"/v1/loops/{lid}/state")).json()
    assert state["version"] == 1 and state["state"] == {"keep": True}

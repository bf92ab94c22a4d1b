"""A JSON body is read as JSON whatever Content-Type the client sent (curl -d sends a form)."""

from __future__ import annotations

import httpx
import pytest

BODY = b'{"agent": "calc", "message": "hi", "state": {"llm": "http://127.0.0.1:9"}}'


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "text/plain", None, "application/json; charset=utf-8"],
)
async def test_a_json_body_starts_a_loop_whatever_the_content_type(
    client: httpx.AsyncClient, content_type: str | None
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    r = await client.post("/v1/loops", content=BODY, headers=headers)
    assert r.status_code == 201, r.text
    lid = r.json()["id"]
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    r = await client.post(f"/v1/loops/{lid}/observe", content=b'{"observed": false}', headers=form)
    assert r.status_code == 200 and r.json()["observed"] is False
    assert (await client.post(f"/v1/loops/{lid}/pause", headers=form)).status_code == 200


async def test_a_body_that_is_not_json_is_still_a_422(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/loops",
        content=b"agent=calc&message=hi",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"

"""Known secrets have an owner: each KnownSecrets is its own set, one installed in a task
is the one its code redacts with, and none leaks into a task or test that did not install
it (a secret one test made known once held back another test's streamed text)."""

from __future__ import annotations

import asyncio
import base64
import contextvars
from typing import Any

from agentd import redact
from agentd.api.app import KnownSecretsScope

SECRET = "owner-secret-0123456789"
BLOB = base64.b64encode(bytes(range(256)) * 2).decode()  # a long base64 run, no secret


def test_two_sets_are_independent() -> None:
    a, b = redact.KnownSecrets(SECRET), redact.KnownSecrets()
    assert redact.text(f"echo {SECRET}", known=a) == f"echo {redact.MASK}"
    assert redact.text(f"echo {SECRET}", known=b) == f"echo {SECRET}"
    assert SECRET in a and SECRET not in b


def test_remember_swaps_a_new_snapshot_and_leaves_the_old_one_whole() -> None:
    known = redact.KnownSecrets()
    before = known.snapshot
    known.remember(SECRET)
    assert SECRET not in before.forms and SECRET in known.snapshot.forms
    assert redact.transcript(f"x {SECRET}", known=known) == f"x {redact.MASK}"


def test_a_pinned_secret_outlives_many_per_loop_ones() -> None:
    known = redact.KnownSecrets()
    known.remember("pinned-secret-000", pin=True)
    known.remember(*(f"per-loop-secret-{i:04d}" for i in range(300)))
    assert "pinned-secret-000" in known and len(known) == 256
    assert "per-loop-secret-0299" in known and "per-loop-secret-0000" not in known


def test_without_an_installed_set_nothing_is_known_and_nothing_remembered_stays() -> None:
    def fresh() -> tuple[str, str]:
        redact.current().remember(SECRET)  # no owner here: kept nowhere
        return redact.text(f"echo {SECRET}"), redact.stream_prefix(BLOB, final=False)

    shown, streamed = contextvars.Context().run(fresh)
    assert shown == f"echo {SECRET}"
    assert streamed == BLOB  # nothing known: a base64 run is shown as it streams


async def test_a_set_installed_in_one_task_is_not_seen_by_another() -> None:
    mine = redact.KnownSecrets(SECRET)

    async def held() -> str:
        return redact.stream_prefix("partial answer " + BLOB, final=False)

    with redact.installed(mine):
        inside = asyncio.create_task(held())
    outside = asyncio.create_task(held(), context=contextvars.Context())
    assert not (await inside).endswith(BLOB[-8:])  # held back: might be a secret's start
    assert await outside == "partial answer " + BLOB


async def test_the_api_scope_installs_the_apps_set_for_each_request() -> None:
    mine = redact.KnownSecrets(SECRET)
    seen: list[redact.KnownSecrets] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(redact.current())

    scoped = KnownSecretsScope(app, secrets=mine)
    request = scoped({"type": "http"}, None, None)
    await asyncio.create_task(request, context=contextvars.Context())  # type: ignore[arg-type]
    assert seen == [mine]
    assert redact.current() is not mine  # and only inside the request

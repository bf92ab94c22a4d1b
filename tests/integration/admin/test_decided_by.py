"""Approval decisions and sent messages record who acted: the name of the operator token
used (`AGENTD_OPERATOR_TOKENS`), through the API (`api:<name>`) or the admin UI
(`admin:<name>`); the `api_token` is `operator`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from admin_kit import READ_TOKEN, Browser, anonymous

from agentd.api.state import AppState
from agentd.db.pool import Pool
from agentd.registry import AgentRegistry
from agentd.settings import Settings
from agentd.testing.engine import eventually, fast_settings, running_engine
from agentd.testing.fake_llm import FakeLLM, Reply, Rule, ToolCall

ALICE = "alice-operator-token-0123456789"
BOB = "bob-operator-token-0123456789"


@pytest.fixture
def settings() -> Settings:
    return fast_settings(read_tokens=[READ_TOKEN], operator_tokens={"alice": ALICE, "bob": BOB})


def test_operator_token_names_are_checked() -> None:
    with pytest.raises(ValueError, match="not a name"):
        fast_settings(operator_tokens={"no spaces": ALICE})
    with pytest.raises(ValueError, match="reserved"):
        fast_settings(operator_tokens={"operator": ALICE})
    with pytest.raises(ValueError, match="shorter than 16"):
        fast_settings(operator_tokens={"carol": "short"})


async def test_decisions_record_the_token_name_over_the_api_and_in_the_admin_ui(
    app,  # type: ignore[no-untyped-def]
    app_state: AppState,
    pool: Pool,
    database_url: str,
    registry: AgentRegistry,
    fake_llm: FakeLLM,
    make_browser: Callable[[str], Awaitable[Browser]],
) -> None:
    fake_llm.add(Rule(match="refund", reply=Reply(tool_calls=[ToolCall("refund", {"amount": 1})])))
    fake_llm.add(Rule(match=lambda last: last.role == "tool", reply=Reply(content="done")))
    state = {"llm": fake_llm.base_url}
    async with running_engine(pool, database_url, registry):
        one = await app_state.lifecycle.start(agent="calc", message="refund", state=state)
        two = await app_state.lifecycle.start(agent="calc", message="refund", state=state)

        async def parked(loop_id: object) -> list[object]:
            async with anonymous(app, authorization=f"Bearer {ALICE}") as c:
                return (await c.get(f"/v1/loops/{loop_id}/approvals")).json()["items"]

        (first,) = await eventually(lambda: parked(one.id))
        (second,) = await eventually(lambda: parked(two.id))
        async with anonymous(app, authorization=f"Bearer {ALICE}") as alice:
            r = await alice.post(f"/v1/tool-calls/{first['id']}/approve")
            assert r.status_code == 200 and r.json()["decided_by"] == "api:alice"
            r = await alice.post(f"/v1/loops/{one.id}/messages", json={"content": "thanks"})
            assert r.json()["sent"]["sent_by"] == "api:alice"
        bob = await make_browser(BOB)
        await bob.get(f"/admin/loops/{two.id}")
        denied = await bob.flash(await bob.post(f"/admin/tool-calls/{second['id']}/deny"))
        assert denied.startswith("ok")
        async with anonymous(app, authorization=f"Bearer {BOB}") as c:
            calls = (await c.get(f"/v1/loops/{two.id}/messages")).json()["items"]
        # The loop goes on after the denial: its next turn may call the tool again.
        (call,) = [tc for m in calls for tc in m["tool_calls"] if tc["id"] == second["id"]]
        assert call["approval_status"] == "denied" and call["decided_by"] == "admin:bob"

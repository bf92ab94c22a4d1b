"""Each state vocabulary in agentd.states is exactly what the schema's CHECK allows."""

from __future__ import annotations

import re
from enum import StrEnum
from importlib import resources

import asyncpg

from agentd import states

#: (table, column) -> the enum its `CHECK (column IN (...))` must equal.
CHECKED: dict[tuple[str, str], type[StrEnum]] = {
    ("loops", "status"): states.LoopStatus,
    ("tool_calls", "status"): states.ToolCallStatus,
    ("tool_calls", "approval_status"): states.ApprovalStatus,
    ("messages", "status"): states.MessageStatus,
    ("jobs", "queue"): states.JobQueue,
    ("webhook_deliveries", "status"): states.WebhookDeliveryStatus,
    ("loop_inputs", "mode"): states.InputMode,
    ("loop_inputs", "status"): states.LoopInputStatus,
}
#: CHECKed word lists that are not state words (roles, configuration choices).
NOT_STATES = {
    ("messages", "role"),
    ("mcp_sessions", "transport_kind"),
    ("schedules", "overlap"),
    ("schedules", "source"),
}


async def _word_checks(conn: asyncpg.Connection) -> dict[tuple[str, str], set[str]]:
    """Every single-column CHECK that lists text values, as {(table, column): values}."""
    rows = await conn.fetch(
        """
        SELECT c.conrelid::regclass::text AS tbl, a.attname AS col,
               pg_get_constraintdef(c.oid) AS def
        FROM pg_constraint c
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
        WHERE c.contype = 'c' AND cardinality(c.conkey) = 1
          AND c.connamespace = 'public'::regnamespace
        """
    )
    out: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        # `CHECK ((status = ANY (ARRAY['init'::text, ...])))` as PostgreSQL prints it
        words = set(re.findall(r"'([^']*)'::text", r["def"]))
        if words:
            out.setdefault((r["tbl"], r["col"]), set()).update(words)
    return out


async def test_every_state_enum_equals_its_check(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        checks = await _word_checks(conn)
    finally:
        await conn.close()
    # A new CHECKed vocabulary needs an enum here (or a line in NOT_STATES).
    assert set(checks) == set(CHECKED) | NOT_STATES
    for key, enum in CHECKED.items():
        assert {m.value for m in enum} == checks[key], key


def test_sql_status_reasons_are_transition_reasons() -> None:
    """The reasons the store's SQL writes into loops.status_reason itself."""
    reasons = {m.value for m in states.TransitionReason}
    written: set[str] = set()
    for f in resources.files("agentd.store").joinpath("sql").iterdir():
        if f.name.endswith(".sql"):
            text = f.read_text()
            # `status_reason = 'x'` and `status_reason = CASE ... 'x' ... 'y' END`
            for m in re.finditer(r"status_reason\s*=\s*(CASE\b.*?\bEND|'[^']*')", text, re.S):
                written.update(re.findall(r"'([a-z_]+)'", m.group(1)))
    assert written, "no status_reason writes found: the pattern is stale"
    assert written - reasons == set()


def test_provider_deferrals_are_the_store_words() -> None:
    """The reasons `provider_admit` defers a turn with (providers.sql's CASE)."""
    text = resources.files("agentd.store").joinpath("sql", "providers.sql").read_text()
    words = set(re.findall(r"THEN '(provider_[a-z]+)'", text))
    assert words == {m.value for m in states.DEFERRALS}

"""Concurrency-key counters: how many loops hold a slot under each key (read-only here).

The claim (job_claim_llm) takes slots and a loops trigger gives them back
(sql/functions/concurrency_slots.sql).
"""

from __future__ import annotations

from typing import Any

from agentd.db.pool import Connection
from agentd.store.queries import sql


async def list_(conn: Connection, *, limit: int = 100) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(sql("concurrency_key_list"), limit)]

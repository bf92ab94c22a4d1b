"""Revoked admin sessions: the server-side half of logout for the stateless session cookie.

Guarantee: a revoked session id stays revoked until its cookie has expired anyway.
Tolerates: concurrent logouts of one session (the second insert is a no-op).
Never: stores a token or the cookie itself, only the cookie's random nonce.
Called by: admin/auth.py (every cookie request) and admin/login.py (logout).
"""

from __future__ import annotations

from datetime import datetime

from agentd.db.pool import Connection
from agentd.store.queries import sql


async def revoke(conn: Connection, *, session_id: str, expires_at: datetime) -> None:
    await conn.execute(sql("admin_session_revoke"), session_id, expires_at)
    await conn.execute(sql("admin_session_prune"))


async def is_revoked(conn: Connection, *, session_id: str) -> bool:
    return bool(await conn.fetchval(sql("admin_session_is_revoked"), session_id))

"""Opaque keyset cursors for the loop list: base64url of `[created_at, id]`.

Newest first on (created_at, id): a row inserted while a client pages has a newer key than
the page it is reading (or sorts exactly once), so pages never repeat or skip a row that
existed when paging began.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from uuid import UUID

from agentd.api.problems import ApiProblem


def encode(created_at: datetime, loop_id: UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(loop_id)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(cursor: str) -> tuple[datetime, UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, loop_id = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError("naive timestamp")
        return when, UUID(loop_id)
    except (ValueError, TypeError, AttributeError, binascii.Error, UnicodeError):
        raise ApiProblem(
            400, "cursor is not one this API returned", problem_type="invalid-cursor"
        ) from None

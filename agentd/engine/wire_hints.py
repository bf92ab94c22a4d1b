"""What this process knows the wire log has stored already, per loop: a hint, never a fact.

Guarantee: a loop's hint is a manifest whose turn committed (`settle`), so it never names
a part a rolled-back turn would have stored. Tolerates: a hint the database no longer
matches (another process, a prune): the read's hash check catches it, and a miss only
stores a self-contained manifest. Never: holds more than `CACHE_LOOPS` loops or a hint
older than `CACHE_AGE`. Called by: pipeline/wire.py (built and read there), the LLM
pipeline's EventLogging (`settle`); owned by the engine's Runtime.
"""

from __future__ import annotations

import collections
import time
import uuid
from dataclasses import dataclass
from typing import Any

CACHE_LOOPS = 128  # loops whose last request this process remembers (its text, in pieces)
CACHE_AGE = 3600.0  # seconds: an older hint is dropped (the janitor may prune idle loops' parts)


@dataclass(frozen=True)
class Hint:
    manifest: str  # hex key of the loop's last committed manifest
    pieces: list[str]  # its piece keys, in order
    texts: list[str]  # the text sent of each of them
    sent: dict[str, str]  # the text sent of each of its pieces -> its key (no rehashing)
    safe: dict[str, str]  # key -> stored text, for the pieces that had to be redacted
    at: float
    where: dict[str, int]  # each key of `pieces` -> its first index there
    # SHA-256 state over the bytes of all pieces but the tail (None: redacted), so a body
    # that starts with them hashes only its newer bytes.
    digest: Any = None


class WireHints:
    """Loop -> the last committed request's hint, and the hints of turns not yet settled."""

    def __init__(self) -> None:
        self._known: collections.OrderedDict[uuid.UUID, Hint] = collections.OrderedDict()
        self._pending: dict[tuple[uuid.UUID, uuid.UUID], Hint] = {}

    def get(self, loop_id: uuid.UUID) -> Hint | None:
        k = self._known.get(loop_id)
        if k is None or time.monotonic() - k.at > CACHE_AGE:
            return None
        return k

    def pend(self, loop_id: uuid.UUID, token: uuid.UUID, hint: Hint) -> None:
        """The turn with `token` built events storing `hint`; it holds once they commit."""
        self._pending[(loop_id, token)] = hint

    def settle(self, loop_id: uuid.UUID, token: uuid.UUID, *, committed: bool) -> None:
        """The turn that built events with `token` committed them (or never will)."""
        k = self._pending.pop((loop_id, token), None)
        if k is None or not committed:
            return
        self._known[loop_id] = k
        self._known.move_to_end(loop_id)
        while len(self._known) > CACHE_LOOPS:
            self._known.popitem(last=False)

    def forget(self, loop_id: uuid.UUID | None = None) -> None:
        """Drop the hints (all: a process pointed at another database)."""
        if loop_id is None:
            self._known.clear()
            self._pending.clear()
        else:
            self._known.pop(loop_id, None)

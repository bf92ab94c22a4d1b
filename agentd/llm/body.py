"""A request body encoded once, as the concatenation of pieces the wire log can share.

The bytes sent are exactly `"".join(pieces).encode()`: the JSON of the payload (httpx's own
encoding: UTF-8, no ASCII escaping, compact separators, no NaN), written out by hand so that
each element of the conversation list (`messages`, or Gemini's `contents`) is one piece,
with the frame before and after it as two more. A turn's prompt extends the previous one,
so all but its newest pieces were already in the previous request: pipeline/wire.py stores
each piece once per loop and the request as a reference to them (docs/long-loops.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

LIST_KEYS = ("messages", "contents", "input")


# One encoder for every call: json.dumps with non-default options builds a new one each
# time, which costs more than encoding a short message.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def dumps(value: Any) -> str:
    return _encode(value)


@dataclass(frozen=True)
class Body:
    """One request body: its pieces (texts whose concatenation is the body), the payload
    they were encoded from, and where the conversation list sits in it."""

    pieces: list[str]
    payload: dict[str, Any]
    list_key: str | None  # None: the body is a single piece

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def data(self) -> bytes:
        return self.text.encode()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _list_key(payload: dict[str, Any]) -> str | None:
    for key in LIST_KEYS:
        if isinstance(payload.get(key), list):
            return key
    return None


def frame(payload: dict[str, Any], key: str) -> tuple[str, str]:
    """(the text before the list's first element, the text after its last)."""
    before: list[str] = []
    after: list[str] = []
    seen = False
    for k, v in payload.items():
        if k == key:
            seen = True
            continue
        (after if seen else before).append(f"{dumps(k)}:{dumps(v)}")
    head = "{" + "".join(f"{p}," for p in before) + f"{dumps(key)}:["
    tail = "]" + "".join(f",{p}" for p in after) + "}"
    return head, tail


def element(value: Any, first: bool) -> str:
    return dumps(value) if first else "," + dumps(value)


def encode(payload: dict[str, Any]) -> Body:
    key = _list_key(payload)
    if key is None or any(not isinstance(k, str) for k in payload):
        return Body(pieces=[dumps(payload)], payload=payload, list_key=None)
    head, tail = frame(payload, key)
    items = payload[key]
    return Body(
        pieces=[head, *(element(v, i == 0) for i, v in enumerate(items)), tail],
        payload=payload,
        list_key=key,
    )

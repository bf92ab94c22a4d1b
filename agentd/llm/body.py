"""A request body encoded once, and the pieces of it the wire log can share.

The bytes sent are the JSON of the payload as httpx would encode it (UTF-8, no ASCII
escaping, compact separators, no NaN), encoded once per call. `pieces` splits that exact
text into the part before the conversation list (`messages`, or Gemini's `contents`), each
element of it, and the part after it — checked to concatenate back to the text, else one
piece. A turn's prompt extends the previous one, so all but its newest pieces were in the
previous request: pipeline/wire.py stores each piece once per loop and the request as a
reference to them (docs/long-loops.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
import json.encoder
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LIST_KEYS = ("messages", "contents", "input")


def _default(o: object) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def encoder(*, separators: tuple[str, str], allow_nan: bool) -> Callable[[Any], str]:
    """json.dumps(value, ensure_ascii=False, separators=..., allow_nan=...), built once.

    json.dumps with a non-default option builds a JSONEncoder and a C encoder on every
    call, which costs more than encoding a short message; a long loop's prompt encodes
    hundreds of them a turn. Same output (no circular check: it raises RecursionError)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # not CPython's accelerator: the plain path
        return json.JSONEncoder(
            ensure_ascii=False, separators=separators, allow_nan=allow_nan
        ).encode
    item, key = separators
    run = make(
        None, _default, json.encoder.encode_basestring, None, key, item, False, False, allow_nan
    )
    return lambda value: "".join(run(value, 0))


dumps = encoder(separators=(",", ":"), allow_nan=False)  # httpx's request encoding


class Elements(dict[int, str]):
    """id() of a conversation element -> its JSON text (a dialect's render memo). `joined`:
    (the conversation list, its elements when rendered, all their texts joined with ",")
    — the whole list's text, used while the list still holds exactly those elements."""

    joined: tuple[list[Any], list[Any], str] | None = None


@dataclass(frozen=True)
class Body:
    """One request body: the exact text sent, and the payload it encodes."""

    text: str
    payload: dict[str, Any]
    # (head, tail) of the conversation list's frame when `encode` built the text from it
    # (`frame`): the wire log splits the text with it instead of encoding the frame again.
    head_tail: tuple[str, str] | None = None

    @functools.cached_property
    def data(self) -> bytes:  # sent, hashed and measured: encoded once
        return self.text.encode()

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def list_key(self) -> str | None:
        return _list_key(self.payload)


def _list_key(payload: dict[str, Any]) -> str | None:
    if any(not isinstance(k, str) for k in payload):
        return None
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


def encode(payload: dict[str, Any], elements: dict[int, str] | None = None) -> Body:
    """The payload's JSON text. `elements`: the text of conversation elements already
    encoded (by id; a dialect's render memo), reused instead of encoding them again — the
    same text as dumps(payload), since an object's JSON is its members' JSON joined. With
    `Elements.joined` for the payload's very list, still holding the very same elements
    (an identity check each, in C), the list's text is that one string."""
    joined = getattr(elements, "joined", None)
    if elements or joined is not None:
        key = _list_key(payload)
        if key is not None:
            head, tail = frame(payload, key)
            items = payload[key]
            if (
                joined is not None
                and joined[0] is items
                and len(items) == len(joined[1])
                and all(map(operator.is_, items, joined[1]))
            ):
                return Body(text=head + joined[2] + tail, payload=payload, head_tail=(head, tail))
            assert elements is not None
            text = ",".join([elements.get(id(v)) or dumps(v) for v in items])
            return Body(text=head + text + tail, payload=payload, head_tail=(head, tail))
    return Body(text=dumps(payload), payload=payload)


def pieces(b: Body, known_prefix: list[str] | None = None) -> list[str]:
    """The body as pieces — the head (up to the conversation list's `[`), each element,
    the tail — whose concatenation is exactly `b.text` (checked; else one piece).

    `known_prefix`: the head and first elements of an earlier body (its pieces but the
    tail). When this body starts with them, only its newer elements are encoded again."""
    return split(b, known_prefix)[0]


def split(b: Body, known_prefix: list[str] | None = None) -> tuple[list[str], int]:
    """pieces(), and how many of them are `known_prefix`'s (0: it was not used)."""
    key = b.list_key
    if key is None:
        return [b.text], 0
    items = b.payload[key]
    if known_prefix and len(known_prefix) - 1 <= len(items):
        n = len(known_prefix) - 1  # elements in the prefix
        prefix = "".join(known_prefix)
        if b.text.startswith(prefix):
            _, tail = b.head_tail or frame(b.payload, key)
            out = [*known_prefix, *(element(v, i == 0) for i, v in enumerate(items[n:], n)), tail]
            if "".join(out) == b.text:
                return out, len(known_prefix)
    head, tail = b.head_tail or frame(b.payload, key)
    out = [head, *(element(v, i == 0) for i, v in enumerate(items)), tail]
    if "".join(out) != b.text:
        return [b.text], 0
    return out, 0

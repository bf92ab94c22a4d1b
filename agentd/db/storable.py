"""Storable text: what PostgreSQL cannot hold is replaced before it reaches the server.

PostgreSQL's `text` refuses NUL (0x00); UTF-8 cannot carry a lone surrogate (U+D800 to U+DFFF);
`jsonb` refuses the `\\u0000` escape, lone surrogate escapes, and the `NaN`/`Infinity` tokens
Python's json writes for non-finite floats. All of these arrive from outside (a model's
answer or tool arguments, a tool's result, an error body) and used to fail the write with a
raw driver error, losing the paid completion. Every parameter the pool's connections send
passes through here (`StorableConnection` for text, the json codec for json/jsonb), so no
store function has to remember: NUL and lone surrogates become U+FFFD, a surrogate pair
held as two code points becomes the character it encodes, and non-finite numbers in JSON
become null. Clean values pass untouched, at the cost of a substring scan.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from typing import Any

import msgspec
import orjson

REPLACEMENT = "\ufffd"

# In json.dumps' (ASCII-only) output a real escape is a `\u` preceded by an even run of
# escaped backslashes. A high+low pair is a valid character (an emoji): keep it; a lone
# surrogate or NUL escape becomes U+FFFD.
_BAD_ESCAPE = re.compile(
    r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}|d[89a-f][0-9a-f]{2}|0000)"
)


def text(value: str) -> str:
    """`value`, storable in a PostgreSQL `text` column (the same object when it already is)."""
    if "\x00" in value:
        value = value.replace("\x00", REPLACEMENT)
    if value.isascii():  # O(1): CPython keeps the flag
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # utf-16 with surrogatepass joins pairs; decoding with "replace" marks lone halves.
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def _fix_escape(m: re.Match[str]) -> str:
    if len(m.group(2)) > 4:  # a valid pair
        return m.group(0)
    return m.group(1) + "\\ufffd"


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _refuse(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _uuid_or_refuse(value: object) -> object:
    # orjson writes a uuid.UUID as its canonical string itself, but not a subclass (asyncpg
    # reads uuid columns as its own): those come here, on both paths, and are written alike.
    if isinstance(value, uuid.UUID):
        return str(value)
    return _refuse(value)


def dumps(value: object) -> str:
    """JSON text that `json` and `jsonb` accept: the pool's json/jsonb encoder.

    orjson first (several times faster; the worker encodes every row's documents here). It
    writes non-finite floats as null and NUL as `\\u0000`, and refuses what needs the
    careful path (lone surrogates, integers past 64 bits, non-str keys, types json would
    refuse too): that goes to `json` as before. A UUID is written as its canonical string
    on both paths (the store passes ids as they are)."""
    try:
        out = orjson.dumps(value, default=_uuid_or_refuse, option=_ORJSON_OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError is one
        return _dumps_stdlib(value)
    if "\\u0000" in out:
        out = _BAD_ESCAPE.sub(_fix_escape, out)
    return out


def _dumps_stdlib(value: object) -> str:
    # ensure_ascii: NUL and surrogates appear only as \u escapes
    out = json.dumps(value, default=_uuid_or_refuse)
    if "NaN" in out or "Infinity" in out:  # a bare token, or the word inside a string
        out = json.dumps(_finite(value), default=_uuid_or_refuse)
    if "\\u0000" in out or "\\ud" in out:
        out = _BAD_ESCAPE.sub(_fix_escape, out)
    return out


_decoder = msgspec.json.Decoder()


def loads(text: str) -> Any:
    """The value of JSON text the server sent: the pool's json/jsonb decoder.

    msgspec first: about three times faster than `json` (the worker decodes every prefetched
    history here) and, unlike orjson, it keeps an integer past 64 bits an int. What it
    refuses and `json` takes (a `json` column may hold a lone surrogate escape or an
    exponent past a double) goes to `json`, whose answer is the reference."""
    try:
        return _decoder.decode(text)
    except (msgspec.DecodeError, UnicodeError):  # ValidationError is one; a lone surrogate
        return json.loads(text)


def args(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Query parameters with every str (and str in a list, for `text[]`) made storable.

    dicts and lists of dicts go to the json codec (`dumps`), which cleans them itself."""
    out: list[Any] | None = None
    for i, v in enumerate(values):
        if type(v) is str:
            new: object = text(v)
        elif type(v) is list and v:
            new = _text_list(v)
        else:
            continue
        if new is not v:
            if out is None:
                out = list(values)
            out[i] = new
    return values if out is None else tuple(out)


def _text_list(values: list[Any]) -> list[Any]:
    first = next((v for v in values if v is not None), None)
    if type(first) is not str:  # ids, uuids, numbers, json objects: nothing to clean here
        return values
    cleaned = [text(v) if type(v) is str else v for v in values]
    return values if all(a is b for a, b in zip(cleaned, values, strict=True)) else cleaned

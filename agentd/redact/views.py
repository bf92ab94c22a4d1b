"""Views: a text some stored text decodes to, with the way back to its characters.

JSON string escapes, percent-encoding, HTML character references (up to `MAX_DEPTH`
passes), and one JSON key's values across a body's SSE events read as one text.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from typing import Protocol

from agentd.redact.patterns import ESCAPE, JSON_PAIR, MAX_DEPTH, escaped, not_plain


class View(Protocol):
    """A text derived from the raw one; `spans(a, b)` are the raw ranges [a, b) came from."""

    text: str

    def spans(self, a: int, b: int) -> list[tuple[int, int]]: ...


class _Raw:
    def __init__(self, text: str) -> None:
        self.text = text

    def spans(self, a: int, b: int) -> list[tuple[int, int]]:
        return [(a, b)]


class _Decoded:
    """`parent` with escapes that decode to secret characters replaced by them."""

    def __init__(
        self, parent: View, text: str, starts: list[int], origins: list[tuple[int, int, bool]]
    ) -> None:
        self.parent = parent
        self.text = text
        self._starts = starts  # decoded index where each segment begins
        self._origins = origins  # (parent start, parent end, literal run?) per segment

    def _parent_pos(self, i: int, end: bool) -> int:
        k = bisect.bisect_right(self._starts, i) - 1
        start, stop, literal = self._origins[k]
        if literal:
            return start + (i - self._starts[k]) + (1 if end else 0)
        return stop if end else start

    def spans(self, a: int, b: int) -> list[tuple[int, int]]:
        return self.parent.spans(self._parent_pos(a, False), self._parent_pos(b - 1, True))


class _Joined:
    """One JSON key's string values across the raw text (SSE events) read as one string.

    The text comes from `findall` (no match objects); where each value sits in the raw text
    is worked out only when something is found in the text, which a clean body never asks.
    """

    def __init__(self, raw: str, key: str, values: list[str]) -> None:
        self._raw = raw
        self._key = key
        self._pieces: list[tuple[int, int]] | None = None
        self._starts: list[int] = []
        self.text = "".join(values)

    def _located(self) -> list[tuple[int, int]]:
        if self._pieces is None:
            self._pieces = [
                m.span(2) for m in JSON_PAIR.finditer(self._raw) if m.group(1) == self._key
            ]
            n = 0
            for s, e in self._pieces:
                self._starts.append(n)
                n += e - s
        return self._pieces

    def spans(self, a: int, b: int) -> list[tuple[int, int]]:
        pieces = self._located()
        out: list[tuple[int, int]] = []
        k = bisect.bisect_right(self._starts, a) - 1
        while k < len(pieces) and self._starts[k] < b:
            s, e = pieces[k]
            lo = s + max(0, a - self._starts[k])
            hi = s + min(e - s, b - self._starts[k])
            if hi > lo:
                out.append((lo, hi))
            k += 1
        return out


_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _unescape(m: re.Match[str]) -> str:
    esc, pct, dec, hexa = m.groups()
    if pct:
        return chr(int(pct, 16))
    if dec or hexa:  # an HTML character reference (`&#115;`, `&#x73;`)
        code = int(dec, 10) if dec else int(hexa, 16)
        return chr(code) if code <= 0x10FFFF else "\ufffd"
    if len(esc) == 5:
        return chr(int(esc[1:], 16))
    return _SIMPLE.get(esc, esc)


def decode(view: View) -> View | None:
    """One decoding pass (JSON escapes, percent-encoding and HTML character references), or
    None when the text has only the escapes every JSON body is full of (`\\n`, `\\"`):
    they cannot hide a secret."""
    text = view.text
    if not not_plain(text):
        return None
    found = list(ESCAPE.finditer(text))
    starts: list[int] = []
    origins: list[tuple[int, int, bool]] = []
    parts: list[str] = []
    n = pos = 0
    for m in found:  # every escape decodes here (`\u0020` too: text around a key counts)
        if m.start() > pos:
            starts.append(n)
            origins.append((pos, m.start(), True))
            parts.append(text[pos : m.start()])
            n += m.start() - pos
        starts.append(n)
        origins.append((m.start(), m.end(), False))
        parts.append(_unescape(m))
        n += 1
        pos = m.end()
    if pos < len(text):
        starts.append(n)
        origins.append((pos, len(text), True))
        parts.append(text[pos:])
    return _Decoded(view, "".join(parts), starts, origins)


def _joined_views(raw: str) -> list[View]:
    """Per JSON key, its string values across the body concatenated (SSE deltas); a key
    whose values are all alike (an id, a model name) reveals nothing joined."""
    by_key: dict[str, list[str]] = {}
    for key, value in JSON_PAIR.findall(raw):
        values = by_key.get(key)
        if values is None:
            by_key[key] = [value]
        else:
            values.append(value)
    return [
        _Joined(raw, key, values)
        for key, values in by_key.items()
        if len(values) > 1 and len(set(values)) > 1
    ]


def views(value: str, joined: bool = True) -> Iterable[View]:
    bases: list[View] = [_Raw(value)]
    if joined and "data:" in value and '"' in value:
        bases.extend(_joined_views(value))
    for base in bases:
        view: View | None = base
        for _ in range(MAX_DEPTH + 1):
            if view is None:
                break
            yield view
            view = decode(view) if escaped(view.text) else None

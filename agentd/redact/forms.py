"""The forms a known secret encodes to, and how a hit of one is found and extended."""

from __future__ import annotations

import base64
import string
from typing import Any

from agentd.redact.patterns import B64, MIN_SECRET

WINDOW = 12  # characters of a secret that stand for it: a tail or head this long is masked
_ENC_WINDOW = 16  # characters of an encoded form that stand for it (12 bytes of base64)
_B32 = frozenset(string.ascii_uppercase + "234567=")

Linear = tuple[str, str, int]  # (needle, form, where the needle starts in the form)


class Forms:
    """Everything searched for one secret, as plain substrings.

    `linear`: (needle, form, where the needle starts in the form) for the forms that are
    the secret's characters one by one — itself, reversed, spaced, hex — a needle being the
    form's head or tail `WINDOW` characters (`hexa`: the hex ones): a hit is extended along
    the form both ways,
    so a secret missing its first characters (`k-…` after `&#x73;` or UTF-7's `+AHM-`) or
    its last ones (a cut text) is masked as far as it goes. `nul`: the same for its UTF-16
    bytes read as text (searched only where a NUL is). `runs`: (needle, alphabet) for the
    encodings that depend on where the secret sits in a longer blob — base64 (standard and
    URL-safe, 3 alignments), base64 of its UTF-16 (UTF-7), base64 of its base64, base32 —
    each needle an `_ENC_WINDOW`-character window of the characters its bytes alone fix:
    the head and the tail, so a blob wrapped over lines is still found. A hit masks the
    whole encoded token (the run of the alphabet around it, across line breaks)."""

    __slots__ = ("hexa", "linear", "nul", "runs")

    def __init__(self, secret: str) -> None:
        self.linear: list[Linear] = []
        self.hexa: list[Linear] = []
        self.nul: list[Linear] = []
        self.runs: list[tuple[str, frozenset[str]]] = []
        raw = secret.encode()
        hexa = raw.hex()
        self._linear(self.linear, secret, 1, both=True)
        self._linear(self.linear, secret[::-1], 1)
        self._linear(self.linear, " ".join(secret), 2)
        self._linear(self.hexa, hexa, 2)
        self._linear(self.hexa, hexa.upper(), 2)
        if secret.isascii():  # UTF-16 read as UTF-8 or Latin-1: NULs between the characters
            self._linear(self.nul, "".join(c + "\x00" for c in secret), 2, both=True)
            self._linear(self.nul, "".join("\x00" + c for c in secret), 2, both=True)
        for core in _cores(raw, 3, 4, base64.b64encode):
            url = core.replace("+", "-").replace("/", "_")
            for c in dict.fromkeys((core, url)):
                self._run(c, B64, both=True)
            for outer in _cores(core.encode(), 3, 4, base64.b64encode):
                self._run(outer, B64)
        for core in _cores(secret.encode("utf-16-be"), 3, 4, base64.b64encode):
            self._run(core, B64)
        for core in _cores(raw, 5, 8, base64.b32encode):
            self._run(core, _B32)

    @staticmethod
    def _linear(out: list[Linear], form: str, width: int, both: bool = False) -> None:
        w = WINDOW * width
        if len(form) <= w:
            out.append((form, form, 0))
            return
        out.append((form[:w], form, 0))
        if both:
            out.append((form[-w:], form, len(form) - w))

    def _run(self, core: str, alphabet: frozenset[str], both: bool = False) -> None:
        if len(core) < MIN_SECRET:
            return
        w = _ENC_WINDOW
        for needle in (core[:w], core[-w:]) if both else (core[:w],):
            self.runs.append((needle, alphabet))


def _cores(raw: bytes, group: int, chars: int, encode: Any) -> list[str]:
    """The characters of `raw`'s encoding its bytes alone determine, at each alignment it
    can start at inside a longer blob (`group` bytes make `chars` characters)."""
    bits = 8 * group // chars  # bits per character: 6 for base64, 5 for base32
    out = []
    for k in range(group):
        enc = encode(b"\0" * k + raw).decode()
        out.append(enc[-(-8 * k // bits) : (8 * (k + len(raw))) // bits])
    return out


_RUN_TABLE = bytes(0x61 if chr(i) in B64 else 0x20 for i in range(256))
_RUN = b"a" * 16


def run_text(value: str) -> tuple[str, list[tuple[int, int]]] | None:
    """The runs of 16+ base64 characters in `value` (every encoded form's needle lies in
    one), joined by \x01, with (where each starts in the join, where in `value`); None when
    there is none. Found on a byte-translated copy, so it costs ~2 µs a KB, and the encoded
    forms' dozens of needles are then searched in the runs only, not in the whole text."""
    if value.isascii():
        mapped = value.encode().translate(_RUN_TABLE)
    else:  # one byte per character, so positions line up: non-ASCII is never base64
        mapped = value.encode("latin-1", "replace").translate(_RUN_TABLE)
    i = mapped.find(_RUN)
    if i < 0:
        return None
    pieces: list[str] = []
    where: list[tuple[int, int]] = []
    n = 0
    while i >= 0:
        while i > 0 and mapped[i - 1] == 0x61:  # a run found from the middle
            i -= 1
        j = mapped.find(b" ", i)
        j = len(mapped) if j < 0 else j
        where.append((n, i))
        pieces.append(value[i:j])
        n += j - i + 1
        i = mapped.find(_RUN, j)
    return "\x01".join(pieces), where


def found_known(text: str, forms: tuple[Linear, ...], out: list[tuple[int, int]]) -> None:
    """Each hit of a form's head or tail, extended along the form as far as `text` follows
    it both ways."""
    for needle, form, at in forms:
        i = text.find(needle)
        while i >= 0:
            s, f = i, at
            while s > 0 and f > 0 and text[s - 1] == form[f - 1]:
                s -= 1
                f -= 1
            e, f = i + len(needle), at + len(needle)
            while e < len(text) and f < len(form) and text[e] == form[f]:
                e += 1
                f += 1
            out.append((s, e))
            i = text.find(needle, i + 1)


_WRAPPED = 16  # a whole line of an encoded blob this long may go on on the next line
_BREAKS = ("\r\n", "\n", "\\r\\n", "\\n")  # a line break, raw or JSON-escaped


def run_around(text: str, s: int, e: int, alphabet: frozenset[str]) -> tuple[int, int]:
    """The encoded token around [s, e): the run of `alphabet`, with the other lines of a
    blob wrapped over lines of one width (`_WRAPPED`+; the last line may be shorter). A
    letter after a backslash is an escape's (`\\n`), not the token's."""
    n = len(text)

    def start(i: int) -> int:
        while i > 0 and text[i - 1] in alphabet and not (i > 1 and text[i - 2] == "\\"):
            i -= 1
        return i

    def end(j: int) -> int:
        while j < n and text[j] in alphabet:
            j += 1
        return j

    def break_before(i: int) -> int:  # where the line break ending at i starts, or -1
        for br in _BREAKS:
            if text.endswith(br, 0, i):
                return i - len(br)
        return -1 if i > 0 else 0

    def break_after(j: int) -> int:  # where the line after the break at j starts, or -1
        for br in _BREAKS:
            if text.startswith(br, j):
                return j + len(br)
        return -1 if j < n else n

    s, e = start(s), end(e)
    width = e - s
    if width < _WRAPPED or break_before(s) < 0 or break_after(e) < 0:
        return s, e  # not a whole line
    while s > 0:  # the lines before, each of the same width
        b = break_before(s)
        i = start(b)
        if b <= 0 or b - i != width or break_before(i) < 0:
            break
        s = i
    last = width
    while last == width and e < n:  # the lines after, while the one before was full
        k = break_after(e)
        j = end(k)
        if j == k or j - k > width or break_after(j) < 0:
            break
        last, e = j - k, j
    return s, e

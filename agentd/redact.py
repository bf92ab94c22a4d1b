"""Secret redaction for events, logs, the UI and transcripts.

Two detectors: patterns (bearer tokens, `sk-…` / `AIza…` keys, `key=` params, Basic
credentials, a URL's userinfo password) and the exact values agentd knows to be secret
(provider keys, MCP tokens, the API's own tokens, webhook secrets: `remember`,
agentd/known_secrets.py). Both run on every form a stored text can be decoded from, not
only on the raw text: JSON string escapes (`\\u0073k-…`, any subset of the characters,
nested), percent-encoding, HTML character references, the values of one key concatenated
across a body's SSE events (a key streamed back in two deltas), and base64 at any
alignment (a known secret inside `Basic dXNlcjpzay0…`). A known secret is also searched for
in the forms it encodes to (`_Forms`: reversed, spaced, hex, UTF-16, base64 wrapped over
lines, base64 of base64, UTF-7, base32), computed once when it becomes known, and by its
head or tail 12 characters. A match in a decoded view masks the raw characters it was
decoded from, so the rest of the text is stored as it was. See docs/security.md.

`text` / `scrub` / `headers` mask both kinds (events, logs, wire logs, shown URLs);
`transcript` masks known secrets only, where the store writes a loop's transcript, and
`stream_prefix` does the same for an answer still streaming.

Cheap on the hot path: every detector is gated by a substring test, and a decoded view is
built only when the text holds an escape beyond the `\\n` / `\\"` every JSON body is full of.
The encoded forms are searched only inside runs of 16+ base64 characters (`_run_text`).
A JSON-like document is first tested whole, its texts joined: when no gate opens on the
join, none opens on any text in it, and it is returned as it was without a walk.
"""

from __future__ import annotations

import base64
import bisect
import re
import string
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

MASK = "[REDACTED]"
_SECRET_HEADERS = {
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "set-cookie",
    "proxy-authorization",
}
_SECRET_KEYS = {
    "api_key",
    "api_token",
    "apikey",
    "token",
    "password",
    "secret",
    "authorization",
    "access_token",
    "refresh_token",
    "x-api-key",
    "x-goog-api-key",
} | _SECRET_HEADERS

_PARAM = re.compile(r"(?i)[?&](?:key|api_key|apikey|token|access_token)=(?P<s>[^&\s\"'\\]+)")

# (needle that must occur, lower-cased text?, pattern whose group "s" — or whole match — is
# the secret). The needle keeps the regex off texts that cannot match.
_PATTERNS: list[tuple[str, bool, re.Pattern[str]]] = [
    ("bearer", True, re.compile(r"(?i)bearer\s+(?P<s>[A-Za-z0-9._~+/=-]+)")),
    ("basic", True, re.compile(r"(?i)\bbasic\s+(?P<s>[A-Za-z0-9+/_-]{6,}={0,2})")),
    # Every name the `key=` pattern knows ends in "key=" or "token=" (any case): gated on
    # those, not on "=", which half of all texts hold (`charset=utf-8`, `is_success=True`).
    ("key=", True, _PARAM),
    ("token=", True, _PARAM),
    ("sk-", False, re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{8,}")),
    ("AIza", False, re.compile(r"(?<![A-Za-z0-9])AIza[A-Za-z0-9_-]{20,}")),
    # A URL's userinfo password (`https://user:pass@host`): the user name stays readable.
    ("@", False, re.compile(r"://[^/\s:@\"'<>\\]*:(?P<s>[^/\s@\"'<>\\]+)@")),
]

# Key shapes recognised inside base64 blobs too (an echoed `Basic`-less credential, a
# header dumped encoded): the base64 of each prefix at its three alignments gates the work.
_SHAPED = re.compile(r"sk-[A-Za-z0-9_-]{8,}|AIza[A-Za-z0-9_-]{20,}")  # any byte may precede
_B64_RUN = re.compile(r"(?<!\\)[A-Za-z0-9+/_-]{16,}={0,2}")  # not an escape's letter


def _prefix_cores(prefix: str) -> tuple[str, ...]:
    raw = prefix.encode()
    out = []
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode()
        out.append(enc[-(-8 * k // 6) : (8 * (k + len(raw))) // 6])
    return tuple(out)


_SHAPED_CORES = _prefix_cores("sk-") + _prefix_cores("AIza")

# Every backslash escape is consumed left to right, as a JSON decoder does (so `\\\\u0073`
# is a backslash and `u0073`, not an `s`).
_ESCAPE = re.compile(
    r"\\(u[0-9a-fA-F]{4}|.)|%([0-9a-fA-F]{2})|&#(?:([0-9]{1,7})|[xX]([0-9a-fA-F]{1,6}));", re.S
)
# Some escape other than the plain ones (`\\n`, `\\"`, ...). Searching for it anywhere finds
# the same verdict as consuming escapes left to right: a backslash this finds is either an
# escape's first character, or the second of a `\\\\`, itself not plain.
_NOT_PLAIN = re.compile(r'\\[^ntrbf"]|%[0-9a-fA-F]{2}', re.S)
_HTML_REF = re.compile(r"&#[0-9xX]")  # apart: one more alternative slows every search
_B64 = frozenset(string.ascii_letters + string.digits + "+/=_-")
_JSON_PAIR = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*"((?:[^"\\]|\\.)*)"', re.S)
_MAX_DEPTH = 3  # decoding passes: JSON inside JSON inside a percent-encoded parameter
_MIN_SECRET = 8  # shorter values would mask ordinary words
_MAX_KNOWN = 256

# The exact secret values this process knows, each with its forms (`_Forms`): computed once
# when the set changes, searched for as plain substrings. Process-wide by nature (like the
# environment it is read from): the last-line scrub in store.events and the log processor
# have no other way to see them. Replaced, never mutated, so a reader in another thread
# iterates stable tuples.
_known: dict[str, _Forms] = {}
_linear: tuple[tuple[str, str, int], ...] = ()
_hexa: tuple[tuple[str, str, int], ...] = ()
_nul_linear: tuple[tuple[str, str, int], ...] = ()
_runs: tuple[tuple[str, frozenset[str]], ...] = ()
_pinned: frozenset[str] = frozenset()

# Every case-sensitive substring some detector needs before it can match (the lower-cased
# ones are "bearer" and "basic"): a text holding none of them, with no escape a decoded view
# could start from and no SSE body to join, is returned as it was without building a view.
_FIXED_NEEDLES = tuple(n for n, lower, _ in _PATTERNS if not lower) + _SHAPED_CORES
_LOWER_NEEDLES = tuple(n for n, lower, _ in _PATTERNS if lower)
_needles: tuple[str, ...] = _FIXED_NEEDLES
# A document's keys that mask their value whatever it holds, as they appear serialized.
_QUOTED_KEYS = tuple(f'"{k}"' for k in sorted(_SECRET_KEYS))
# Characters JSON escapes: a needle holding one does not appear as itself in JSON text, so
# the test of a serialized document (`json_is_clean`) is off while such a secret is known.
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')
_whole_ok = True


def remember(*values: str | None, pin: bool = False) -> None:
    """Mask these exact values (and every encoding of them) wherever text is redacted.
    `pin`: a configured secret (API tokens, env keys), never evicted by per-loop ones."""
    global _pinned
    fresh = [v for v in values if v and len(v) >= _MIN_SECRET and v not in _known]
    if not fresh:
        if pin:
            _pinned = _pinned | {v for v in values if v and v in _known}
        return
    known = dict(_known)
    for v in fresh:
        known[v] = _forms(v)
    if pin:
        _pinned = _pinned | set(fresh)
    # Per-loop secrets (a key from a loop's state) must not grow this without bound.
    for old in [k for k in known if k not in _pinned][: max(0, len(known) - _MAX_KNOWN)]:
        del known[old]
    _set_known(known)


def forget_all() -> None:
    """Tests: start from no known secret."""
    global _pinned
    _pinned = frozenset()
    _set_known({})


def _set_known(known: dict[str, _Forms]) -> None:
    global _known, _linear, _hexa, _nul_linear, _runs, _needles, _whole_ok
    linear = {n: (n, f, o) for forms in known.values() for n, f, o in forms.linear}
    hexa = {n: (n, f, o) for forms in known.values() for n, f, o in forms.hexa}
    nul = {n: (n, f, o) for forms in known.values() for n, f, o in forms.nul}
    runs = {n: (n, a) for forms in known.values() for n, a in forms.runs}
    needles = dict.fromkeys(_FIXED_NEEDLES)
    needles.update(dict.fromkeys(linear))
    _known, _needles = known, tuple(needles)
    _linear, _hexa, _nul_linear = tuple(linear.values()), tuple(hexa.values()), tuple(nul.values())
    _runs = tuple(runs.values())
    # Only `_needles` are searched in every text. The encoded forms (`_hexa`, `_runs`) are
    # searched in its runs of base64 characters only (`_run_text`); the NUL forms where a
    # NUL is (or its JSON escape `\u0000`, which `_NOT_PLAIN` sees).
    _whole_ok = not any(_JSON_ESCAPED.search(n) for n in (*_needles, *hexa, *runs))


_RUN_TABLE = bytes(0x61 if chr(i) in _B64 else 0x20 for i in range(256))
_RUN = b"a" * 16


def _run_text(value: str) -> tuple[str, list[tuple[int, int]]] | None:
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


# --- the forms of a known secret ------------------------------------------------------------

_WINDOW = 12  # characters of a secret that stand for it: a tail or head this long is masked
_ENC_WINDOW = 16  # characters of an encoded form that stand for it (12 bytes of base64)
_B32 = frozenset(string.ascii_uppercase + "234567=")
_HEX = frozenset(string.hexdigits)


class _Forms:
    """Everything searched for one secret, as plain substrings.

    `linear`: (needle, form, where the needle starts in the form) for the forms that are
    the secret's characters one by one — itself, reversed, spaced, hex — a needle being the
    form's head or tail `_WINDOW` characters (`hexa`: the hex ones): a hit is extended along
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
        self.linear: list[tuple[str, str, int]] = []
        self.hexa: list[tuple[str, str, int]] = []
        self.nul: list[tuple[str, str, int]] = []
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
                self._run(c, _B64, both=True)
            for outer in _cores(core.encode(), 3, 4, base64.b64encode):
                self._run(outer, _B64)
        for core in _cores(secret.encode("utf-16-be"), 3, 4, base64.b64encode):
            self._run(core, _B64)
        for core in _cores(raw, 5, 8, base64.b32encode):
            self._run(core, _B32)

    @staticmethod
    def _linear(out: list[tuple[str, str, int]], form: str, width: int, both: bool = False) -> None:
        w = _WINDOW * width
        if len(form) <= w:
            out.append((form, form, 0))
            return
        out.append((form[:w], form, 0))
        if both:
            out.append((form[-w:], form, len(form) - w))

    def _run(self, core: str, alphabet: frozenset[str], both: bool = False) -> None:
        if len(core) < _MIN_SECRET:
            return
        w = _ENC_WINDOW
        for needle in (core[:w], core[-w:]) if both else (core[:w],):
            self.runs.append((needle, alphabet))


def _forms(secret: str) -> _Forms:
    return _Forms(secret)


def _cores(raw: bytes, group: int, chars: int, encode: Any) -> list[str]:
    """The characters of `raw`'s encoding its bytes alone determine, at each alignment it
    can start at inside a longer blob (`group` bytes make `chars` characters)."""
    bits = 8 * group // chars  # bits per character: 6 for base64, 5 for base32
    out = []
    for k in range(group):
        enc = encode(b"\0" * k + raw).decode()
        out.append(enc[-(-8 * k // bits) : (8 * (k + len(raw))) // bits])
    return out


# --- views: a text some stored text decodes to, with the way back to its characters ------


class _View(Protocol):
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
        self, parent: _View, text: str, starts: list[int], origins: list[tuple[int, int, bool]]
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
    """Pieces of the raw text (one key's values across SSE events) read as one string."""

    def __init__(self, pieces: list[tuple[int, int]], raw: str) -> None:
        self._pieces = pieces
        self._starts: list[int] = []
        n = 0
        for s, e in pieces:
            self._starts.append(n)
            n += e - s
        self.text = "".join(raw[s:e] for s, e in pieces)

    def spans(self, a: int, b: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        k = bisect.bisect_right(self._starts, a) - 1
        while k < len(self._pieces) and self._starts[k] < b:
            s, e = self._pieces[k]
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


def _escaped(value: str) -> bool:
    """Could a decoding pass change it (the characters every escape starts with)?"""
    return "\\" in value or "%" in value or "&#" in value


def _not_plain(value: str) -> bool:
    """Does it hold an escape other than the plain ones a decoding pass could reveal?"""
    if ("\\" in value or "%" in value) and _NOT_PLAIN.search(value) is not None:
        return True
    return "&#" in value and _HTML_REF.search(value) is not None


def _decode(view: _View) -> _View | None:
    """One decoding pass (JSON escapes, percent-encoding and HTML character references), or
    None when the text has only the escapes every JSON body is full of (`\\n`, `\\"`):
    they cannot hide a secret."""
    text = view.text
    if not _not_plain(text):
        return None
    found = list(_ESCAPE.finditer(text))
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


def _joined_views(raw: str) -> list[_View]:
    """Per JSON key, its string values across the body concatenated (SSE deltas); a key
    whose values are all alike (an id, a model name) reveals nothing joined."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    for m in _JSON_PAIR.finditer(raw):
        by_key.setdefault(m.group(1), []).append(m.span(2))
    views: list[_View] = []
    for pieces in by_key.values():
        if len(pieces) > 1 and len({raw[s:e] for s, e in pieces}) > 1:
            views.append(_Joined(pieces, raw))
    return views


def _views(value: str, joined: bool = True) -> Iterable[_View]:
    bases: list[_View] = [_Raw(value)]
    if joined and "data:" in value and '"' in value:
        bases.extend(_joined_views(value))
    for base in bases:
        view: _View | None = base
        for _ in range(_MAX_DEPTH + 1):
            if view is None:
                break
            yield view
            view = _decode(view) if _escaped(view.text) else None


# --- detection ----------------------------------------------------------------------------


def _found(text: str, known_only: bool = False) -> list[tuple[int, int]]:
    """Ranges of `text` that are, or encode, a secret (`known_only`: a known one)."""
    out: list[tuple[int, int]] = []
    low: str | None = None
    for needle, lower, pat in () if known_only else _PATTERNS:
        if lower:
            low = text.lower() if low is None else low
            if needle not in low:
                continue
        elif needle not in text:
            continue
        for m in pat.finditer(text):
            g = "s" if "s" in pat.groupindex else 0
            if needle == "basic" and not _is_credentials(m.group(g)):
                continue  # "basic validation failed" is prose, not a credential
            out.append((m.start(g), m.end(g)))
    if not known_only and any(core in text for core in _SHAPED_CORES):
        for m in _B64_RUN.finditer(text):
            if _shaped_inside(m.group()):
                out.append(m.span())
    _found_known(text, _linear, out)
    if "\x00" in text:
        _found_known(text, _nul_linear, out)
    runs = _run_text(text) if _runs else None
    if runs is None:
        return out
    joined, where = runs
    starts = [a for a, _ in where]
    hits: list[tuple[int, int]] = []
    _found_known(joined, _hexa, hits)
    for a, b in hits:  # back to the text: a hit lies inside one run
        k = bisect.bisect_right(starts, a) - 1
        out.append((a - where[k][0] + where[k][1], b - where[k][0] + where[k][1]))
    for needle, alphabet in _runs:
        i = joined.find(needle)
        while i >= 0:
            k = bisect.bisect_right(starts, i) - 1
            at = i - where[k][0] + where[k][1]
            out.append(_run_around(text, at, at + len(needle), alphabet))
            i = joined.find(needle, i + 1)
    return out


def _found_known(
    text: str, forms: tuple[tuple[str, str, int], ...], out: list[tuple[int, int]]
) -> None:
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


def _run_around(text: str, s: int, e: int, alphabet: frozenset[str]) -> tuple[int, int]:
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


def _shaped_inside(run: str) -> bool:
    """Does this base64 run, decoded at any of its alignments, hold a key's shape?"""
    if not any(core in run for core in _SHAPED_CORES):
        return False
    for drop in range(4):
        tail = run[drop:].rstrip("=")
        tail = tail[: len(tail) - len(tail) % 4] if len(tail) % 4 == 1 else tail
        for alt in (None, b"-_"):
            try:
                raw = base64.b64decode(tail + "=" * (-len(tail) % 4), altchars=alt)
            except ValueError:
                continue
            if _SHAPED.search(raw.decode("latin-1")):
                return True
    return False


def _is_credentials(token: str) -> bool:
    """Basic auth carries base64 of `user:password`."""
    try:
        raw = base64.b64decode(
            token + "=" * (-len(token) % 4),
            altchars=b"-_" if ("-" in token or "_" in token) else None,
            validate=True,
        )
    except ValueError:
        return False
    return b":" in raw


def _find_all(text: str, needle: str, out: list[tuple[int, int]]) -> list[tuple[int, int]]:
    i = text.find(needle)
    while i >= 0:
        out.append((i, i + len(needle)))
        i = text.find(needle, i + 1)
    return out


def _may_hold(value: str) -> bool:
    """False when no detector can match `value` or any view of it (see `_needles`)."""
    # Plain loops: faster than any(map(...)) or a generator on the short texts most are.
    for needle in _needles:
        if needle in value:
            return True
    if _may_hold_known(value):
        return True
    if "data:" in value and '"' in value:
        return True
    low = value.lower()
    for needle in _LOWER_NEEDLES:  # noqa: SIM110 (a generator costs more here)
        if needle in low:
            return True
    return False


def _may_hold_known(value: str, linear: bool = False) -> bool:
    """The gates of the known secrets' forms beyond `_needles` (`linear`: those too)."""
    if linear:
        for needle, _, _ in _linear:
            if needle in value:
                return True
    if _not_plain(value):
        return True
    if _nul_linear and "\x00" in value:
        for needle, _, _ in _nul_linear:
            if needle in value:
                return True
    runs = _run_text(value) if _runs else None
    if runs is not None:
        joined = runs[0]
        for needle, _ in _runs:
            if needle in joined:
                return True
        for needle, _, _ in _hexa:
            if needle in joined:
                return True
    return False


def _clean_document(value: dict[Any, Any] | list[Any], also: Sequence[str]) -> bool:
    """True when scrubbing `value` cannot change it: no secret key holds a text, and its
    texts, joined, hold no needle, no escape a view could start from and none of `also`.
    A gate closed on the join is closed on every text in it (each test looks for something
    inside one text; the \\x01 between two texts can only open a gate, never hide one), so
    the walk that would test each text alone is skipped. False when it cannot tell."""
    texts: list[str] = []
    if not _texts_of(value, texts, 0):
        return False
    joined = "\x01".join(texts)
    if also and any(s and s in joined for s in also):
        return False
    return not _may_hold(joined)


def _texts_of(value: Any, out: list[str], depth: int) -> bool:
    """Adds the texts `scrub` would test to `out`; False where it would mask a value by its
    key (or nests too deep to tell)."""
    if depth > 50:
        return False
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if _masked_by_key(k, v):
                return False
            if isinstance(v, str):  # inline: most values are texts (a call each would cost)
                out.append(v)
            elif not _texts_of(v, out, depth + 1):
                return False
    elif isinstance(value, list | tuple):
        for v in value:
            if isinstance(v, str):
                out.append(v)
            elif not _texts_of(v, out, depth + 1):
                return False
    return True


def _masked_by_key(key: object, value: object) -> bool:
    """A member `scrub` masks whole for its key: a non-empty text under a secret's name."""
    return (
        isinstance(value, str)
        and bool(value)
        and isinstance(key, str)
        and key.lower() in _SECRET_KEYS
    )


def json_is_clean(blob: str, *, also: Sequence[str] = ()) -> bool:
    """True when scrubbing the value whose JSON text (or a run of whole members or elements
    of it) is `blob` cannot change it: each string of the value is in `blob` as itself but
    for the characters JSON escapes (a quote or backslash escaped is still a backslash:
    `_NOT_PLAIN` sees it), so a gate closed on the whole is closed on every part. For a
    text already made (a wire-log piece); `_clean_document` tests a value. The text must be
    JSON as `json.dumps(..., ensure_ascii=False)` or orjson writes it. False when it cannot
    tell."""
    if not _whole_ok or any(_JSON_ESCAPED.search(s) for s in also):
        return False
    if _may_hold(blob) or any(map(blob.__contains__, also)):
        return False
    return not any(map(blob.lower().__contains__, _QUOTED_KEYS))


def text(value: str, *, also: Sequence[str] = ()) -> str:
    """`value` with every secret in it, in any form it decodes to, replaced by MASK;
    `also`: literal secrets to mask first (a provider key this call was given)."""
    if also:
        for secret in also:
            if secret and secret in value:
                value = value.replace(secret, MASK)
    if not value or not _may_hold(value):
        return value
    return _masked(value, _views(value), known_only=False)


def transcript(value: Any, _depth: int = 0) -> Any:
    """`value` (a text, or a JSON-like value: tool arguments, metadata) with every secret
    this process knows (`remember`), in any form it decodes to, replaced by MASK — and
    nothing else: no pattern (`Bearer …`, `sk-…`), since a transcript may rightly hold
    such words. What the store writes into the transcript (messages, tool calls, errors,
    the live stream) passes here, so every face shows, and the next prompt sends, the
    mask. Returns `value` itself when nothing is masked."""
    if not _known or _depth > 50:
        return value
    if isinstance(value, str):
        if not value or not _may_hold_known(value, linear=True):
            return value
        return _masked(value, _views(value, joined=False), known_only=True)
    if isinstance(value, dict):
        out = {k: transcript(v, _depth + 1) for k, v in value.items()}
        return value if all(out[k] is v for k, v in value.items()) else out
    if isinstance(value, list | tuple):
        items = [transcript(v, _depth + 1) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


_HOLD_PIECE = 4  # a streamed tail this long that is a piece of a secret's form waits
_HOLD_RUN = 8  # a trailing run of base64 characters this long waits (an encoded blob)
_TOKEN = _B64 | frozenset("\\%&#;.")  # what an escaped secret is written with


def stream_prefix(raw: str, *, final: bool) -> str:
    """What of a text still being streamed (a model's answer so far) may be shown, masked
    as `transcript` masks it: all of it once `final`, else all but a tail that could be
    the start of a known secret — the longest tail (`_HOLD_PIECE`+ characters) that is a
    piece of one of its forms, a trailing run of `_HOLD_RUN`+ base64 characters (an
    encoded blob going on), a trailing token holding an escape (`\\u`, `%`, `&#`). What
    is held back is shown with the next chunk, so a secret split across chunks is never
    shown but for its first few characters; ordinary words are not held back."""
    if not _known:
        return raw
    cut = len(raw)
    if not final and raw:
        forms = (*_linear, *_nul_linear, *_hexa)
        longest = max(len(f) for _, f, _ in forms)
        tail = raw[-longest:]
        hold = 0
        for _, form, _ in forms:
            lo, hi = hold, len(tail)  # a tail of `tail` in `form`: monotone in its length
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if tail[-mid:] in form:
                    lo = mid
                else:
                    hi = mid - 1
            hold = lo
        cut = len(raw) - hold if hold >= _HOLD_PIECE else cut
        run = len(raw)
        while run > 0 and raw[run - 1] in _B64:
            run -= 1
        if len(raw) - run >= _HOLD_RUN:
            cut = min(cut, run)
        token = len(raw)
        while token > max(0, len(raw) - 6 * longest) and raw[token - 1] in _TOKEN:
            token -= 1
        if _escaped(raw[token:]):
            cut = min(cut, token)
    return transcript(raw[:cut])


def _masked(value: str, views: Iterable[_View], *, known_only: bool) -> str:
    spans: list[tuple[int, int]] = []
    for view in views:
        for a, b in _found(view.text, known_only):
            if b > a:
                spans.extend(view.spans(a, b))
    if not spans:
        return value
    spans.sort()
    out: list[str] = []
    pos = 0
    for s, e in spans:
        if s <= pos and out:  # overlaps (or touches) the span just masked
            pos = max(pos, e)
            continue
        out.append(value[pos:s])
        out.append(MASK)
        pos = max(pos, e)
    out.append(value[pos:])
    return "".join(out)


def headers(h: dict[str, str] | Any, *, also: Sequence[str] = ()) -> dict[str, str]:
    """`h` with secret headers masked whole and every other value as `text` masks it
    (`also`: as in `text`)."""
    return {
        k: (MASK if k.lower() in _SECRET_HEADERS else text(str(v), also=also))
        for k, v in dict(h).items()
    }


def scrub(value: Any, *, also: Sequence[str] = (), whole: bool = True, _depth: int = 0) -> Any:
    """Recursively mask secrets in a JSON-like value (`also`: as in `text`). A document
    nothing in which can be masked is returned itself, not copied. `whole`: test the
    document's texts joined first (`_clean_document`), the cheaper way when few of them
    could hold a secret; without it, each text is tested on its own."""
    if _depth > 50:
        return value
    if isinstance(value, str):
        return text(value, also=also)
    if isinstance(value, dict):
        if _depth == 0 and whole and _clean_document(value, also):
            return value
        out = {}
        for k, v in value.items():
            out[k] = MASK if _masked_by_key(k, v) else scrub(v, also=also, _depth=_depth + 1)
        return out
    if isinstance(value, list | tuple):
        if _depth == 0 and whole and isinstance(value, list) and _clean_document(value, also):
            return value
        return [scrub(v, also=also, _depth=_depth + 1) for v in value]
    return value

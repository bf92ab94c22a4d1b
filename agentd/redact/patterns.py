"""What a secret looks like: header and key names, the patterns, the escapes and gates.

Immutable: compiled patterns and the needles that gate them, shared by every set of known
secrets.
"""

from __future__ import annotations

import base64
import re
import string

MASK = "[REDACTED]"
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "proxy-authorization",
    }
)
SECRET_KEYS = (
    frozenset(
        {
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
        }
    )
    | SECRET_HEADERS
)

_PARAM = re.compile(r"(?i)[?&](?:key|api_key|apikey|token|access_token)=(?P<s>[^&\s\"'\\]+)")

# (needle that must occur, lower-cased text?, pattern whose group "s" — or whole match — is
# the secret). The needle keeps the regex off texts that cannot match.
PATTERNS: tuple[tuple[str, bool, re.Pattern[str]], ...] = (
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
)

# Key shapes recognised inside base64 blobs too (an echoed `Basic`-less credential, a
# header dumped encoded): the base64 of each prefix at its three alignments gates the work.
_SHAPED = re.compile(r"sk-[A-Za-z0-9_-]{8,}|AIza[A-Za-z0-9_-]{20,}")  # any byte may precede
B64_RUN = re.compile(r"(?<!\\)[A-Za-z0-9+/_-]{16,}={0,2}")  # not an escape's letter


def _prefix_cores(prefix: str) -> tuple[str, ...]:
    raw = prefix.encode()
    out = []
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode()
        out.append(enc[-(-8 * k // 6) : (8 * (k + len(raw))) // 6])
    return tuple(out)


SHAPED_CORES = _prefix_cores("sk-") + _prefix_cores("AIza")

# Every backslash escape is consumed left to right, as a JSON decoder does (so `\\\\u0073`
# is a backslash and `u0073`, not an `s`).
ESCAPE = re.compile(
    r"\\(u[0-9a-fA-F]{4}|.)|%([0-9a-fA-F]{2})|&#(?:([0-9]{1,7})|[xX]([0-9a-fA-F]{1,6}));", re.S
)
# Some escape other than the plain ones (`\\n`, `\\"`, ...). Searching for it anywhere finds
# the same verdict as consuming escapes left to right: a backslash this finds is either an
# escape's first character, or the second of a `\\\\`, itself not plain.
_NOT_PLAIN = re.compile(r'\\[^ntrbf"]|%[0-9a-fA-F]{2}', re.S)
_HTML_REF = re.compile(r"&#[0-9xX]")  # apart: one more alternative slows every search
B64 = frozenset(string.ascii_letters + string.digits + "+/=_-")
# Possessive runs (`*+`): no class here overlaps `"` or `\\`, so backtracking can never find
# another match, and without it a 40 kB SSE body is scanned 5x faster.
JSON_PAIR = re.compile(r'"([^"\\]*+(?:\\.[^"\\]*+)*+)"\s*+:\s*+"([^"\\]*+(?:\\.[^"\\]*+)*+)"', re.S)
MAX_DEPTH = 3  # decoding passes: JSON inside JSON inside a percent-encoded parameter
MIN_SECRET = 8  # shorter values would mask ordinary words
MAX_KNOWN = 256

# Every case-sensitive substring some detector needs before it can match (the lower-cased
# ones are "bearer" and "basic"): a text holding none of them, with no escape a decoded view
# could start from and no SSE body to join, is returned as it was without building a view.
FIXED_NEEDLES = tuple(n for n, lower, _ in PATTERNS if not lower) + SHAPED_CORES
LOWER_NEEDLES = tuple(n for n, lower, _ in PATTERNS if lower)
# A document's keys that mask their value whatever it holds, as they appear serialized.
QUOTED_KEYS = tuple(f'"{k}"' for k in sorted(SECRET_KEYS))
# Characters JSON escapes: a needle holding one does not appear as itself in JSON text, so
# the test of a serialized document (`json_is_clean`) is off while such a secret is known.
JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')


def escaped(value: str) -> bool:
    """Could a decoding pass change it (the characters every escape starts with)?"""
    return "\\" in value or "%" in value or "&#" in value


def not_plain(value: str) -> bool:
    """Does it hold an escape other than the plain ones a decoding pass could reveal?"""
    if ("\\" in value or "%" in value) and _NOT_PLAIN.search(value) is not None:
        return True
    return "&#" in value and _HTML_REF.search(value) is not None


def shaped_inside(run: str) -> bool:
    """Does this base64 run, decoded at any of its alignments, hold a key's shape?"""
    if not any(core in run for core in SHAPED_CORES):
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


def is_credentials(token: str) -> bool:
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


def masked_by_key(key: object, value: object) -> bool:
    """A member `scrub` masks whole for its key: a non-empty text under a secret's name."""
    return (
        isinstance(value, str)
        and bool(value)
        and isinstance(key, str)
        and key.lower() in SECRET_KEYS
    )

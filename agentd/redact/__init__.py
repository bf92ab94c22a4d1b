"""Secret redaction for events, logs, the UI and transcripts.

Two detectors: patterns (bearer tokens, `sk-…` / `AIza…` keys, `key=` params, Basic
credentials, a URL's userinfo password: patterns.py) and the exact values a process knows
to be secret (provider keys, MCP tokens, the API's own tokens, webhook secrets: a
`KnownSecrets` its runtime owns, known.py). Both run on every form a stored text can be
decoded from, not only on the raw text (views.py): JSON string escapes (`\\u0073k-…`, any
subset of the characters, nested), percent-encoding, HTML character references, the values
of one key concatenated across a body's SSE events (a key streamed back in two deltas), and
base64 at any alignment (a known secret inside `Basic dXNlcjpzay0…`). A known secret is also
searched for in the forms it encodes to (forms.py: reversed, spaced, hex, UTF-16, base64
wrapped over lines, base64 of base64, UTF-7, base32), computed once when it becomes known,
and by its head or tail 12 characters. A match in a decoded view masks the raw characters it
was decoded from, so the rest of the text is stored as it was (detect.py). See
docs/security.md.

`text` / `scrub` / `headers` mask both kinds (events, logs, wire logs, shown URLs);
`transcript` masks known secrets only, where the store writes a loop's transcript, and
`stream_prefix` does the same for an answer still streaming. Each takes the set to mask
(`known`); without it, the set the running task's owner installed (`installed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentd.redact import detect
from agentd.redact.known import KnownSecrets, Snapshot, current, installed, snapshot
from agentd.redact.patterns import (
    B64,
    JSON_ESCAPED,
    MASK,
    QUOTED_KEYS,
    SECRET_HEADERS,
    escaped,
    masked_by_key,
)
from agentd.redact.views import views

__all__ = [
    "MASK",
    "KnownSecrets",
    "current",
    "headers",
    "installed",
    "json_is_clean",
    "scrub",
    "stream_prefix",
    "text",
    "transcript",
]


def json_is_clean(
    blob: str, *, also: Sequence[str] = (), known: KnownSecrets | None = None
) -> bool:
    """True when scrubbing the value whose JSON text (or a run of whole members or elements
    of it) is `blob` cannot change it: each string of the value is in `blob` as itself but
    for the characters JSON escapes (a quote or backslash escaped is still a backslash:
    patterns.not_plain sees it), so a gate closed on the whole is closed on every part. For
    a text already made (a wire-log piece); detect.clean_document tests a value. The text
    must be JSON as `json.dumps(..., ensure_ascii=False)` or orjson writes it. False when it
    cannot tell."""
    k = snapshot(known)
    if not k.whole_ok or any(JSON_ESCAPED.search(s) for s in also):
        return False
    if detect.may_hold(blob, k) or any(map(blob.__contains__, also)):
        return False
    return not any(map(blob.lower().__contains__, QUOTED_KEYS))


def text(value: str, *, also: Sequence[str] = (), known: KnownSecrets | None = None) -> str:
    """`value` with every secret in it, in any form it decodes to, replaced by MASK;
    `also`: literal secrets to mask first (a provider key this call was given)."""
    return _text(value, also, snapshot(known))


def _text(value: str, also: Sequence[str], k: Snapshot) -> str:
    if also:
        for secret in also:
            if secret and secret in value:
                value = value.replace(secret, MASK)
    if not value or not detect.may_hold(value, k):
        return value
    return detect.masked(value, views(value), k, known_only=False)


def transcript(value: Any, *, known: KnownSecrets | None = None) -> Any:
    """`value` (a text, or a JSON-like value: tool arguments, metadata) with every known
    secret, in any form it decodes to, replaced by MASK — and nothing else: no pattern
    (`Bearer …`, `sk-…`), since a transcript may rightly hold such words. What the store
    writes into the transcript (messages, tool calls, errors, the live stream) passes here,
    so every face shows, and the next prompt sends, the mask. Returns `value` itself when
    nothing is masked."""
    k = snapshot(known)
    return _transcript(value, k, 0) if k.forms else value


def _transcript(value: Any, k: Snapshot, depth: int) -> Any:
    if depth > 50:
        return value
    if isinstance(value, str):
        if not value or not detect.may_hold_known(value, k, linear=True):
            return value
        return detect.masked(value, views(value, joined=False), k, known_only=True)
    if isinstance(value, dict):
        out = {key: _transcript(v, k, depth + 1) for key, v in value.items()}
        return value if all(out[key] is v for key, v in value.items()) else out
    if isinstance(value, list | tuple):
        items = [_transcript(v, k, depth + 1) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


_HOLD_PIECE = 4  # a streamed tail this long that is a piece of a secret's form waits
_HOLD_RUN = 8  # a trailing run of base64 characters this long waits (an encoded blob)
_TOKEN = B64 | frozenset("\\%&#;.")  # what an escaped secret is written with


def stream_prefix(raw: str, *, final: bool, known: KnownSecrets | None = None) -> str:
    """What of a text still being streamed (a model's answer so far) may be shown, masked
    as `transcript` masks it: all of it once `final`, else all but a tail that could be
    the start of a known secret — the longest tail (`_HOLD_PIECE`+ characters) that is a
    piece of one of its forms, a trailing run of `_HOLD_RUN`+ base64 characters (an
    encoded blob going on), a trailing token holding an escape (`\\u`, `%`, `&#`). What
    is held back is shown with the next chunk, so a secret split across chunks is never
    shown but for its first few characters; ordinary words are not held back."""
    k = snapshot(known)
    if not k.forms:
        return raw
    cut = len(raw)
    if not final and raw:
        forms = (*k.linear, *k.nul_linear, *k.hexa)
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
        while run > 0 and raw[run - 1] in B64:
            run -= 1
        if len(raw) - run >= _HOLD_RUN:
            cut = min(cut, run)
        token = len(raw)
        while token > max(0, len(raw) - 6 * longest) and raw[token - 1] in _TOKEN:
            token -= 1
        if escaped(raw[token:]):
            cut = min(cut, token)
    return _transcript(raw[:cut], k, 0)


def headers(
    h: dict[str, str] | Any, *, also: Sequence[str] = (), known: KnownSecrets | None = None
) -> dict[str, str]:
    """`h` with secret headers masked whole and every other value as `text` masks it
    (`also`: as in `text`)."""
    k = snapshot(known)
    return {
        name: (MASK if name.lower() in SECRET_HEADERS else _text(str(v), also, k))
        for name, v in dict(h).items()
    }


def scrub(
    value: Any,
    *,
    also: Sequence[str] = (),
    whole: bool = True,
    known: KnownSecrets | None = None,
) -> Any:
    """Recursively mask secrets in a JSON-like value (`also`: as in `text`). A document
    nothing in which can be masked is returned itself, not copied. `whole`: test the
    document's texts joined first (detect.clean_document), the cheaper way when few of
    them could hold a secret; without it, each text is tested on its own."""
    k = snapshot(known)
    if whole and isinstance(value, dict | list) and detect.clean_document(value, also, k):
        return value
    return _scrub(value, also, k, 0)


def _scrub(value: Any, also: Sequence[str], k: Snapshot, depth: int) -> Any:
    if depth > 50:
        return value
    if isinstance(value, str):
        return _text(value, also, k)
    if isinstance(value, dict):
        return {
            key: MASK if masked_by_key(key, v) else _scrub(v, also, k, depth + 1)
            for key, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_scrub(v, also, k, depth + 1) for v in value]
    return value

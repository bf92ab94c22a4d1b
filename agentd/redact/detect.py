"""Detection: the ranges of a text that are, or encode, a secret, and the gates that skip
the search on texts where none can be.

Cheap on the hot path: every detector is gated by a substring test, and a decoded view is
built only when the text holds an escape beyond the `\\n` / `\\"` every JSON body is full of.
The encoded forms are searched only inside runs of 16+ base64 characters (forms.run_text).
A JSON-like document is first tested whole, its texts joined: when no gate opens on the
join, none opens on any text in it, and it is returned as it was without a walk.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

from agentd.redact.forms import found_known, run_around, run_text
from agentd.redact.known import Snapshot
from agentd.redact.patterns import (
    B64_RUN,
    LOWER_NEEDLES,
    MASK,
    PATTERNS,
    SHAPED_CORES,
    is_credentials,
    masked_by_key,
    not_plain,
    shaped_inside,
)
from agentd.redact.views import View


def found(text: str, k: Snapshot, known_only: bool = False) -> list[tuple[int, int]]:
    """Ranges of `text` that are, or encode, a secret (`known_only`: one of `k`)."""
    out: list[tuple[int, int]] = []
    low: str | None = None
    for needle, lower, pat in () if known_only else PATTERNS:
        if lower:
            low = text.lower() if low is None else low
            if needle not in low:
                continue
        elif needle not in text:
            continue
        for m in pat.finditer(text):
            g = "s" if "s" in pat.groupindex else 0
            if needle == "basic" and not is_credentials(m.group(g)):
                continue  # "basic validation failed" is prose, not a credential
            out.append((m.start(g), m.end(g)))
    if not known_only and any(core in text for core in SHAPED_CORES):
        for m in B64_RUN.finditer(text):
            if shaped_inside(m.group()):
                out.append(m.span())
    found_known(text, k.linear, out)
    if "\x00" in text:
        found_known(text, k.nul_linear, out)
    runs = run_text(text) if k.runs else None
    if runs is None:
        return out
    joined, where = runs
    starts = [a for a, _ in where]
    hits: list[tuple[int, int]] = []
    found_known(joined, k.hexa, hits)
    for a, b in hits:  # back to the text: a hit lies inside one run
        i = bisect.bisect_right(starts, a) - 1
        out.append((a - where[i][0] + where[i][1], b - where[i][0] + where[i][1]))
    for needle, alphabet in k.runs:
        j = joined.find(needle)
        while j >= 0:
            i = bisect.bisect_right(starts, j) - 1
            at = j - where[i][0] + where[i][1]
            out.append(run_around(text, at, at + len(needle), alphabet))
            j = joined.find(needle, j + 1)
    return out


def may_hold(value: str, k: Snapshot) -> bool:
    """False when no detector can match `value` or any view of it (see `Snapshot.needles`)."""
    # Plain loops: faster than any(map(...)) or a generator on the short texts most are.
    for needle in k.needles:
        if needle in value:
            return True
    if may_hold_known(value, k):
        return True
    if "data:" in value and '"' in value:
        return True
    low = value.lower()
    for needle in LOWER_NEEDLES:  # noqa: SIM110 (a generator costs more here)
        if needle in low:
            return True
    return False


def may_hold_known(value: str, k: Snapshot, linear: bool = False) -> bool:
    """The gates of the known secrets' forms beyond `needles` (`linear`: those too)."""
    if linear:
        for needle, _, _ in k.linear:
            if needle in value:
                return True
    if not_plain(value):
        return True
    if k.nul_linear and "\x00" in value:
        for needle, _, _ in k.nul_linear:
            if needle in value:
                return True
    runs = run_text(value) if k.runs else None
    if runs is not None:
        joined = runs[0]
        for needle, _ in k.runs:
            if needle in joined:
                return True
        for needle, _, _ in k.hexa:
            if needle in joined:
                return True
    return False


def clean_document(value: dict[Any, Any] | list[Any], also: Sequence[str], k: Snapshot) -> bool:
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
    return not may_hold(joined, k)


def _texts_of(value: Any, out: list[str], depth: int) -> bool:
    """Adds the texts `scrub` would test to `out`; False where it would mask a value by its
    key (or nests too deep to tell)."""
    if depth > 50:
        return False
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key, v in value.items():
            if masked_by_key(key, v):
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


def masked(value: str, views: Iterable[View], k: Snapshot, *, known_only: bool) -> str:
    """`value` with every range found in any of its views replaced by MASK."""
    spans: list[tuple[int, int]] = []
    for view in views:
        for a, b in found(view.text, k, known_only):
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

"""Turns LLM and MCP wire exchanges into event rows.

An LLM request is stored as it was sent, without storing the transcript again every turn:
its body (llm/body.py: the exact bytes, as pieces) becomes a *manifest* — the previous
request's manifest plus ranges of its pieces and the keys of new ones — and every piece
and manifest is a content-addressed part of the loop (`wire_parts`, key = the first 16
bytes of the SHA-256 of its stored text). The event carries the parts this process does
not know to be stored already (a trigger on `events` moves them into `wire_parts`,
sql/functions/wire_parts.sql) and `body_ref` {manifest, sha256 of the body, bytes,
redacted}. Reading it back (store/events.py) rebuilds the exact text and checks the hash.
So a turn writes O(its new messages), not O(history), and redacts only its new pieces.

The process's cache (engine/wire_hints.py, on the Runtime: loop → the last stored request:
its manifest, its pieces' texts and keys) is a hint: only the pieces it does not know are
hashed, redacted and written; a miss stores a self-contained manifest; a part the cache
wrongly believed stored is caught by the read's hash check. It learns a manifest only once
the turn that wrote it committed (`settle`), so it never points at a part a rolled-back
turn would have stored.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

from agentd import redact
from agentd.engine.wire_hints import Hint, WireHints
from agentd.llm import body as wire_body
from agentd.llm.types import WireExchange
from agentd.store.models import NewEvent


def key_of(text: str) -> str:
    return hashlib.sha256(text.encode()).digest()[:16].hex()


def _ops(base: list[str], new: list[str], where: dict[str, int], same: int = 0) -> list[Any]:
    """`new` as ranges [a, b] of `base` and single keys, greedily. `where`: each key of
    `base` -> its first index; `same`: new[:same] is known to be base[:same]."""
    out: list[Any] = []
    j = 0
    while j < len(new):
        at = 0 if j == 0 and same else where.get(new[j])
        if at is None:
            out.append(new[j])
            j += 1
            continue
        i, n = at, (same if j == 0 and same else 1)
        while j + n < len(new) and i + n < len(base) and base[i + n] == new[j + n]:
            n += 1
        out.append([i, i + n])
        j += n
    return out


def _first_index(keys: list[str]) -> dict[str, int]:
    where: dict[str, int] = {}
    for i, k in enumerate(keys):
        where.setdefault(k, i)
    return where


def encode(
    ex: WireExchange, *, parts: dict[str, str], hint: Hint | None
) -> tuple[dict[str, Any], Hint]:
    """`body_ref` for one exchange; adds the parts to store to `parts`. Only the pieces
    the hint does not know are hashed, redacted and written: O(the turn's new messages) —
    when the body starts with the hint's pieces (a prompt that extends the last one) even
    the bookkeeping skips them."""
    b: wire_body.Body = ex.request_wire
    secrets = ex.request_secrets
    base = hint.pieces if hint is not None else []
    texts, same = wire_body.split(b, hint.texts[:-1] if hint is not None else None)
    if hint is not None and same:
        # texts[:same] are the hint's own pieces: stored, under its keys.
        keys = base[:same]
        # Still the text -> key of stored pieces (the old tail's too: a hint, never wrong).
        known = sent = dict(hint.sent)
        safe_of = {k: v for k, v in hint.safe.items() if hint.where.get(k, same) < same}
        base_where = hint.where
    else:
        same = 0
        keys = []
        known = hint.sent if hint is not None else {}
        sent = {}
        safe_of = {}
        base_where = _first_index(base)
    redacted = bool(safe_of)
    stored = dict(hint.safe) if hint is not None else {}
    frame: tuple[str, str] | None = None
    list_key = b.list_key
    items = b.payload.get(list_key) if list_key is not None else None
    last = len(texts) - 1
    whole = len(texts) == 1
    for i in range(same, len(texts)):
        text = texts[i]
        k = known.get(text)
        if k is None:
            if redact.json_is_clean(text, also=secrets):
                safe = text  # nothing in it to mask: stored as sent, not encoded again
            elif whole or list_key is None:
                safe = wire_body.dumps(redact.scrub(b.payload, also=secrets))
            elif i == 0 or i == last:
                if frame is None:
                    emptied = {**b.payload, list_key: []}
                    frame = wire_body.frame(redact.scrub(emptied, also=secrets), list_key)
                safe = frame[0] if i == 0 else frame[1]
            else:
                assert items is not None
                safe = wire_body.element(redact.scrub(items[i - 1], also=secrets), i == 1)
            k = key_of(safe)
            if safe != text:
                stored[k] = safe
            parts[k] = safe
        if k in stored:
            safe_of[k] = stored[k]
            redacted = True
        keys.append(k)
        sent[text] = k
    manifest = wire_body.dumps(
        {
            "b": hint.manifest if hint is not None else None,
            "o": _ops(base, keys, base_where, same),
            "n": len(keys),
        }
    )
    mkey = key_of(manifest)
    parts[mkey] = manifest
    digest = None
    if redacted:
        # A rebuild cannot match what was sent, so the hash is of the stored (redacted)
        # text: a hash of the text around a secret would let anyone test guesses of it.
        data = "".join(safe_of.get(k, t) for t, k in zip(texts, keys, strict=True)).encode()
        sha = hashlib.sha256(data).hexdigest()
    else:
        # Of b.data, as the pieces concatenate to it: the hint's state, then what is new.
        if same and hint is not None and hint.digest is not None:
            h = hint.digest.copy()
            h.update("".join(texts[same:-1]).encode())
        else:
            h = hashlib.sha256("".join(texts[:-1]).encode())
        digest = h.copy()
        h.update(texts[-1].encode())
        sha = h.hexdigest()
    ref = {
        "v": 1,
        "manifest": mkey,
        "sha256": sha,
        "bytes": len(b.data),
        "redacted": redacted,
    }
    if same:
        where = dict(base_where)
        for k in base[same:]:
            if where.get(k, -1) >= same:
                del where[k]
        for i in range(same, len(keys)):
            where.setdefault(keys[i], i)
    else:
        where = _first_index(keys)
    return ref, Hint(
        manifest=mkey,
        pieces=keys,
        texts=texts,
        sent=sent,
        safe=safe_of,
        at=time.monotonic(),
        where=where,
        digest=digest,
    )


def llm_events(
    exchanges: list[WireExchange],
    *,
    loop_id: uuid.UUID,
    hints: WireHints | None,
    token: uuid.UUID | None = None,
) -> list[NewEvent]:
    """One `llm.request` event per attempt. With `token` (the turn's execution token), what
    they store becomes the loop's hint in `hints` once `hints.settle` says they committed;
    without `hints`, each request is stored self-contained."""
    out = []
    hint = hints.get(loop_id) if hints is not None else None
    for ex in exchanges:
        request_data: dict[str, Any] = {"headers": ex.request_headers}
        if ex.request_wire is not None:
            parts: dict[str, str] = {}
            ref, hint = encode(ex, parts=parts, hint=hint)
            request_data["body_ref"] = ref
            request_data["parts"] = parts
        else:
            request_data["body"] = ex.request_body
        out.append(
            NewEvent(
                name="llm.request",
                loop_id=loop_id,
                http_method=ex.method,
                url=ex.url,
                status=ex.status,
                request_data=request_data,
                response_data={"headers": ex.response_headers, "body": ex.response_body},
                duration=ex.duration,
                log=(
                    f"attempt {ex.attempt}"
                    + (f": {ex.error}" if ex.error else "")
                    + (f"; retry in {ex.retry_delay:.2f}s" if ex.retry_delay is not None else "")
                ),
            )
        )
    if hints is not None and token is not None and hint is not None and out:
        hints.pend(loop_id, token, hint)
    return out


def mcp_events(
    exchanges: list[Any],
    *,
    loop_id: uuid.UUID | None,
    tool_call_id: int | None = None,
    inbound_session_id: int | None = None,
    prefix: str = "mcp",
) -> list[NewEvent]:
    out = []
    for ex in exchanges:
        data = ex.as_event() if hasattr(ex, "as_event") else dict(ex)
        out.append(
            NewEvent(
                name=f"{prefix}.{data.get('method') or 'request'}",
                loop_id=loop_id,
                tool_call_id=tool_call_id,
                inbound_session_id=inbound_session_id,
                http_method="POST",
                url=data.get("server"),
                status=data.get("status"),
                request_data={
                    "raw": data.get("raw_request"),
                    "headers": data.get("request_headers") or {},
                },
                response_data={
                    "raw": data.get("raw_response"),
                    "headers": data.get("response_headers") or {},
                },
                duration=data.get("duration"),
                log="\n".join(x for x in (data.get("error"), data.get("stderr")) if x) or None,
            )
        )
    return out

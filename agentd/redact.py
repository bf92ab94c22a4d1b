"""Secret redaction for events, logs and the UI: bearer tokens, API keys, `key=` params."""

from __future__ import annotations

import re
from typing import Any

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
}
_PATTERNS = [
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1" + MASK),
    (re.compile(r"(?i)([?&](?:key|api_key|apikey|token|access_token)=)[^&\s\"']+"), r"\1" + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), MASK),
    (re.compile(r"\bAIza[A-Za-z0-9_-]{20,}"), MASK),  # Google API keys, echoed in error bodies
]


def text(value: str) -> str:
    for pat, repl in _PATTERNS:
        value = pat.sub(repl, value)
    return value


def headers(h: dict[str, str] | Any) -> dict[str, str]:
    return {k: (MASK if k.lower() in _SECRET_HEADERS else text(str(v))) for k, v in dict(h).items()}


def scrub(value: Any, *, _depth: int = 0) -> Any:
    """Recursively mask secrets in a JSON-like value."""
    if _depth > 50:
        return value
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            secret = isinstance(k, str) and k.lower() in (_SECRET_KEYS | _SECRET_HEADERS)
            if secret and isinstance(v, str) and v:
                out[k] = MASK
            else:
                out[k] = scrub(v, _depth=_depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [scrub(v, _depth=_depth + 1) for v in value]
    return value

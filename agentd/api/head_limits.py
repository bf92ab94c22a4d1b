"""Bounds on a request's head (header bytes and count, request-line length).

Set by the commands that serve HTTP (api/serve.py), enforced by api/http_limits.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HeadLimits:
    """Bounds on a request's head: api/http_limits.py enforces them."""

    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    max_url_bytes: int = 8 * 1024

    @classmethod
    def from_settings(cls, settings: Any) -> HeadLimits:
        return cls(
            max_header_bytes=settings.max_header_bytes,
            max_headers=settings.max_headers,
            max_url_bytes=settings.max_url_bytes,
        )

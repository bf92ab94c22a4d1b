"""Retry decisions for LLM calls: a pure function of what happened, never a sleep.

Rules (reference §2.11): re-send on a status in `policy.statuses` or on a connection that
never established; never on 400/401/403/404/422, a read timeout, a broken stream or a
stream that already handed content to the caller. `Retry-After` (delta-seconds or
HTTP-date) wins over exponential backoff `base * 2**(n-1)`; both are capped by `max_delay`.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

from agentd.errors import LLMIdleTimeout, LLMStatusError, LLMTransportError

NEVER_RETRY = frozenset({400, 401, 403, 404, 422})
DEFAULT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 2  # re-sends beyond the first attempt; 0 disables
    base_delay: float = 1.0
    max_delay: float = 60.0
    statuses: frozenset[int] = field(default=DEFAULT_STATUSES)

    @classmethod
    def from_settings(cls, settings: object) -> RetryPolicy:
        statuses: Iterable[int] = getattr(settings, "llm_retry_statuses", DEFAULT_STATUSES)
        return cls(
            retries=int(getattr(settings, "llm_retries", 2)),
            base_delay=float(getattr(settings, "llm_retry_base_delay", 1.0)),
            max_delay=float(getattr(settings, "llm_retry_max_delay", 60.0)),
            statuses=frozenset(int(s) for s in statuses),
        )


@dataclass(frozen=True)
class RetryDecision:
    delay: float
    reason: str


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header (delta-seconds or HTTP-date), or None."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def _never_connected(exc: BaseException | None) -> bool:
    if isinstance(exc, LLMTransportError):
        return not exc.connected
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


def decide(
    attempt: int,
    *,
    status: int | None = None,
    exc: BaseException | None = None,
    retry_after: float | None = None,
    handed_over: bool = False,
    policy: RetryPolicy,
) -> RetryDecision | None:
    """Whether to re-send after attempt number `attempt` (1-based) failed, and how long to wait.

    None means: give up and raise. The caller sleeps `decision.delay` itself.
    """
    if attempt > policy.retries or handed_over:
        return None
    if status is None and isinstance(exc, LLMStatusError):
        status = exc.status_code
        retry_after = exc.retry_after if retry_after is None else retry_after
    if status is not None:
        if status in NEVER_RETRY or status not in policy.statuses:
            return None
        reason = f"status_{status}"
    elif _never_connected(exc):
        reason = "connect_failed"
    elif isinstance(exc, LLMIdleTimeout):
        reason = "idle_timeout"  # nothing handed over yet: a re-send duplicates nothing
    else:
        return None  # read timeouts, broken streams, protocol errors: the request may be served
    if retry_after is not None:
        return RetryDecision(delay=min(retry_after, policy.max_delay), reason=reason)
    backoff = policy.base_delay * 2 ** (attempt - 1)
    return RetryDecision(delay=min(backoff, policy.max_delay), reason=reason)

from __future__ import annotations

import email.utils

import httpx
import pytest

from agentd.errors import (
    LLMIdleTimeout,
    LLMProtocolError,
    LLMStatusError,
    LLMTimeout,
    LLMTransportError,
)
from agentd.llm import retry
from agentd.llm.retry import RetryDecision, RetryPolicy

POLICY = RetryPolicy(retries=2, base_delay=1.0, max_delay=60.0)


@pytest.mark.parametrize("status", sorted(retry.DEFAULT_STATUSES))
def test_retryable_status_backs_off_exponentially(status: int) -> None:
    assert retry.decide(1, status=status, policy=POLICY) == RetryDecision(1.0, f"status_{status}")
    assert retry.decide(2, status=status, policy=POLICY) == RetryDecision(2.0, f"status_{status}")


def test_backoff_is_capped_by_max_delay() -> None:
    policy = RetryPolicy(retries=10, base_delay=1.0, max_delay=5.0)
    assert retry.decide(8, status=503, policy=policy) == RetryDecision(5.0, "status_503")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_deterministic_statuses_are_never_retried(status: int) -> None:
    everything = RetryPolicy(statuses=frozenset(range(400, 600)))
    assert retry.decide(1, status=status, policy=everything) is None


def test_status_outside_policy_is_not_retried() -> None:
    assert retry.decide(1, status=501, policy=POLICY) is None


def test_retries_stop_after_policy_retries() -> None:
    assert retry.decide(3, status=503, policy=POLICY) is None
    assert retry.decide(1, status=503, policy=RetryPolicy(retries=0)) is None


def test_retry_after_wins_over_backoff_and_is_capped() -> None:
    assert retry.decide(1, status=429, retry_after=7.0, policy=POLICY).delay == 7.0  # type: ignore[union-attr]
    assert retry.decide(1, status=429, retry_after=600.0, policy=POLICY).delay == 60.0  # type: ignore[union-attr]


def test_status_error_exception_carries_status_and_retry_after() -> None:
    err = LLMStatusError(status_code=429, retry_after=3.0)
    assert retry.decide(1, exc=err, policy=POLICY) == RetryDecision(3.0, "status_429")


def test_connection_never_established_is_retried() -> None:
    assert retry.decide(1, exc=LLMTransportError(connected=False), policy=POLICY) is not None
    assert retry.decide(1, exc=httpx.ConnectError("refused"), policy=POLICY) is not None


@pytest.mark.parametrize(
    "exc", [LLMTimeout(), LLMTransportError(connected=True), LLMProtocolError()]
)
def test_read_timeout_broken_stream_and_protocol_error_are_not_retried(exc: Exception) -> None:
    assert retry.decide(1, exc=exc, policy=POLICY) is None


def test_handed_over_stream_is_not_retried() -> None:
    assert retry.decide(1, status=503, handed_over=True, policy=POLICY) is None


def test_idle_timeout_is_retried_until_something_was_handed_over() -> None:
    d = retry.decide(1, exc=LLMIdleTimeout(), policy=POLICY)
    assert d is not None and d.reason == "idle_timeout"
    assert retry.decide(1, exc=LLMIdleTimeout(), handed_over=True, policy=POLICY) is None


def test_parse_retry_after_delta_seconds() -> None:
    assert retry.parse_retry_after("120") == 120.0
    assert retry.parse_retry_after(" 1.5 ") == 1.5
    assert retry.parse_retry_after("-3") == 0.0
    assert retry.parse_retry_after(None) is None
    assert retry.parse_retry_after("soon") is None
    assert retry.parse_retry_after("nan") is None


def test_parse_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 30, usegmt=True)
    assert retry.parse_retry_after(header, now=now) == pytest.approx(30.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert retry.parse_retry_after(past, now=now) == 0.0


def test_policy_from_settings() -> None:
    class S:
        llm_retries = 5
        llm_retry_base_delay = 0.5
        llm_retry_max_delay = 9.0
        llm_retry_statuses = [429, 503]

    assert RetryPolicy.from_settings(S()) == RetryPolicy(5, 0.5, 9.0, frozenset({429, 503}))

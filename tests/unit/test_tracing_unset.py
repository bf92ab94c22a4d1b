"""With no tracer provider set, a span is skipped, not built: the current context is left
as it is, so what is propagated does not change."""

from __future__ import annotations

import pytest

from agentd.observability import tracing

trace = pytest.importorskip("opentelemetry.trace")
propagate = pytest.importorskip("opentelemetry.propagate")

PARENT = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


@pytest.fixture
def no_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_PYTHON_TRACER_PROVIDER", raising=False)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)


@pytest.mark.usefixtures("no_provider")
def test_span_without_a_provider_is_the_no_op_span_and_leaves_the_context() -> None:
    before = trace.get_current_span()
    with tracing.span("execute_tool add", attributes={"a": 1}) as s:
        assert s is tracing.NO_SPAN
        assert trace.get_current_span() is before
        headers: dict[str, str] = {}
        tracing.inject(headers)
        assert "traceparent" not in headers


@pytest.mark.usefixtures("no_provider")
def test_span_with_a_stored_parent_still_propagates_it_without_a_provider() -> None:
    headers: dict[str, str] = {}
    with (
        tracing.span("execute_tool add", parent=PARENT),
        tracing.span("tools/call add", client=True) as inner,  # skipped: nothing records it
    ):
        assert inner is tracing.NO_SPAN
        tracing.inject(headers)
    assert headers["traceparent"].split("-")[1] == PARENT["traceparent"].split("-")[1]

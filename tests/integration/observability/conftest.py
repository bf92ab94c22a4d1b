from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agentd.registry import AgentRegistry
from agentd.testing import agents
from agentd.testing.fake_llm import FakeLLM


@pytest.fixture
def registry() -> AgentRegistry:
    return agents.registry()


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    agents.CALLS.clear()
    async with FakeLLM() as fake:
        yield fake


class _Target:
    exporter: Any = None


_target = _Target()


@pytest.fixture(scope="session")
def _tracer_provider() -> Any:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the otel extra is not installed")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    class Switch(SpanProcessor):
        """Exports to the current test's exporter, if any: the global provider can be set
        only once per process, and other tests' spans must not pile up in memory."""

        def on_end(self, span: Any) -> None:
            if _target.exporter is not None:
                _target.exporter.export((span,))

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(Switch())
    return provider


@pytest.fixture
def spans(_tracer_provider: Any) -> Iterator[Any]:
    """An InMemorySpanExporter receiving the spans agentd finishes during this test."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    _target.exporter = exporter
    try:
        yield exporter
    finally:
        _target.exporter = None

"""Optional OpenTelemetry tracing: spans for turns, tool calls and MCP requests.

The `otel` extra is imported once, here; without it every helper is a no-op and costs a
branch. With it, spans go to the global tracer provider: `setup_from_env()` installs an
SDK provider from the standard OTEL_* variables, but only when an exporter or an OTLP
endpoint is named, so an unconfigured process keeps the API's free no-op provider.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from typing import Any

from agentd import __about__, logs

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, StatusCode
except ImportError:  # the extra is not installed
    propagate = trace = None  # type: ignore[assignment]

ENABLED = trace is not None
TRACE_KEYS = ("traceparent", "tracestate")  # W3C trace context, as stored and sent

log = logs.get("agentd.tracing")


class _NoSpan:
    """Stands in for a span when tracing is off; accepts and drops everything."""

    def set_attribute(self, key: str, value: object) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, object]) -> None:
        pass

    def update_name(self, name: str) -> None:
        pass

    def record_exception(self, exception: BaseException, **kw: object) -> None:
        pass

    def set_status(self, *args: object, **kw: object) -> None:
        pass

    def is_recording(self) -> bool:
        return False


NO_SPAN: Any = _NoSpan()


@contextlib.contextmanager
def span(
    name: str,
    *,
    client: bool = False,
    attributes: Mapping[str, Any] | None = None,
    parent: Mapping[str, Any] | None = None,
) -> Iterator[Any]:
    """A current span; `parent` is a W3C carrier (e.g. a tool call's stored traceparent).

    Exceptions are not recorded automatically: callers set the outcome they mean (a
    cancelled turn is not an error)."""
    if trace is None:
        yield NO_SPAN
        return
    carrier = _carrier(parent)
    if not carrier and _no_provider():
        # Nothing would record it: the API's proxy would hand back a non-recording span on
        # the current context, which is left as it is (inject() still sends an outer
        # span's context). About 18 us a span saved, a few per job.
        yield NO_SPAN
        return
    context = propagate.extract(carrier) if carrier else None
    tracer = trace.get_tracer("agentd", __about__.__version__)
    with tracer.start_as_current_span(
        name,
        context=context,
        kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        record_exception=False,
        set_status_on_exception=False,
    ) as s:
        yield s


def _carrier(parent: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The W3C trace context `parent` holds, if any."""
    if not parent:
        return None
    return {k: v for k, v in parent.items() if k in TRACE_KEYS and isinstance(v, str)}


def off(parent: Mapping[str, Any] | None = None) -> bool:
    """`span(..., parent=parent)` would yield the no-op span: its attributes need not be
    built."""
    return trace is None or (not _carrier(parent) and _no_provider())


def _no_provider() -> bool:
    """No tracer provider is set (in code or by OTEL_PYTHON_TRACER_PROVIDER): every span
    would be a non-recording one. (Until one is set, the API answers its proxy provider.)"""
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def fail(s: Any, error_type: str, description: str | None = None) -> None:
    """Mark `s` as failed, the semantic conventions' way (`error.type` plus ERROR status)."""
    if trace is None or not s.is_recording():
        return
    s.set_attribute("error.type", error_type)
    s.set_status(StatusCode.ERROR, description)


@functools.cache
def _suppress_http() -> Callable[[], contextlib.AbstractContextManager[None]] | None:
    """The instrumentations' own switch, `suppress_http_instrumentation()` of
    opentelemetry-instrumentation (imported on first use: it loads wrapt). None when that
    package is not installed: every HTTP instrumentation requires it, so none is running."""
    try:
        from opentelemetry.instrumentation.utils import suppress_http_instrumentation
    except ImportError:
        return None
    return suppress_http_instrumentation


@contextlib.contextmanager
def http_untraced() -> Iterator[None]:
    """Inside, HTTP server and client instrumentations (FastAPI/ASGI, httpx) make no spans;
    agentd's own spans are unaffected."""
    suppress = _suppress_http() if trace is not None else None
    if suppress is None:
        yield
        return
    with suppress():
        yield


def inject(headers: dict[str, str]) -> None:
    """Add `traceparent` (and `tracestate`) for the current span, if one is recording."""
    if propagate is not None:
        propagate.inject(headers)


def carrier() -> dict[str, str]:
    """The current span's W3C context as a small dict, to store with work another process
    picks up (a tool call's metadata); empty when no span is active."""
    if propagate is None:
        return {}
    out: dict[str, str] = {}
    propagate.inject(out)
    return {k: v for k, v in out.items() if k in TRACE_KEYS}


def current_ids() -> dict[str, str]:
    """`trace_id` and `span_id` of the active span, as hex, for log lines; else empty."""
    if trace is None:
        return {}
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return {}
    return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


# --- process setup ----------------------------------------------------------------------

_PROTOCOLS = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}


def _exporter_names(environ: Mapping[str, str]) -> list[str]:
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"  # the Python SDK's default
    ).strip()
    return [_PROTOCOLS.get(protocol, "otlp_proto_grpc") if n == "otlp" else n for n in names if n]


def setup_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Install an SDK tracer provider as the SDK's own env-driven setup would, if
    OTEL_TRACES_EXPORTER or an OTLP endpoint is set. Returns whether tracing is on.

    Everything else is read by the SDK itself: OTEL_SERVICE_NAME and
    OTEL_RESOURCE_ATTRIBUTES (service.name defaults to `agentd`), OTEL_TRACES_SAMPLER,
    OTEL_BSP_*, and the exporters' OTEL_EXPORTER_OTLP_* (endpoint, headers, timeout)."""
    env = os.environ if environ is None else environ
    wanted = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    if trace is None or wanted == "none" or not (wanted or endpoint):
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("tracing.sdk_missing", hint="pip install 'agentd[otel]'")
        return False
    resource = Resource.create({"service.version": __about__.__version__})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "agentd"}))
    provider = TracerProvider(resource=resource)
    found = {ep.name: ep for ep in metadata.entry_points(group="opentelemetry_traces_exporter")}
    names = _exporter_names(env)
    for name in names:
        if name not in found:
            log.warning("tracing.exporter_unknown", exporter=name, known=sorted(found))
            continue
        provider.add_span_processor(BatchSpanProcessor(found[name].load()()))
    trace.set_tracer_provider(provider)
    log.info("tracing.configured", exporters=names, service=resource.attributes["service.name"])
    return True

"""Telemetry: one process's Prometheus metrics, on its own CollectorRegistry (no globals).

Engine pipelines record through small methods; state other services already keep
(lease renewals, reaper totals, busy slots, the pool) is read at scrape time, so those
services carry no metrics code. Labels are bounded: agent and model names, outcomes,
queues, statuses; never loop, tool call or worker ids (those go in logs and traces).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from agentd.llm.types import LLMRequest, Usage, WireExchange
    from agentd.states import ToolCallOutcome, TurnOutcome


# A pipeline context (agentd.engine.context), as far as metrics read it: the engine holds
# a Telemetry, so this module names what it reads instead of importing the contexts.
class TurnNoted(Protocol):
    """A turn's context: the outcome noted on it, its request (None before one is built)
    and its agent."""

    outcome: TurnOutcome | None

    @property
    def request(self) -> LLMRequest | None: ...

    @property
    def agent(self) -> object: ...


class ToolNoted(Protocol):
    """A tool call's context: the outcome noted on it."""

    outcome: ToolCallOutcome | None


# Outcome labels are agentd.states.TurnOutcome and ToolCallOutcome (bounded by those enums).

_TURN_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
_TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
_TOOL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600)


def model_of(ctx: TurnNoted) -> str:
    if ctx.request is not None:
        return ctx.request.provider.model or "unknown"
    return str(getattr(ctx.agent, "model", "") or "unknown")


def _status_of(ex: WireExchange) -> str:
    return str(ex.status) if ex.status else "transport"


class Telemetry:
    """Owned by the process: on `Runtime.telemetry` for the engine and `AppState` for the
    API, so `/metrics` shows both from one registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.fleet: Any = None  # the API's DB-derived gauges (agentd.api.metrics), if served
        r = self.registry
        self.turns = Counter(
            "agentd_turns",
            "LLM turns finished, by outcome.",
            ["agent", "model", "outcome"],
            registry=r,
        )
        self.turn_seconds = Histogram(
            "agentd_turn_duration_seconds",
            "Wall time of one LLM turn, claim to finalize (MCP discovery and DB included).",
            ["agent", "outcome"],
            buckets=_TURN_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "agentd_llm_time_to_first_token_seconds",
            "Time from sending a streaming request to the first delta.",
            ["model"],
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "agentd_llm_tokens",
            "Tokens reported by the model, by type (input, output).",
            ["agent", "model", "type"],
            registry=r,
        )
        self.requests = Counter(
            "agentd_llm_requests",
            "HTTP attempts to a model, by HTTP status (transport: no response).",
            ["model", "status"],
            registry=r,
        )
        self.retries = Counter(
            "agentd_llm_retries",
            "Attempts re-sent after a retryable failure, by the failed attempt's status.",
            ["status"],
            registry=r,
        )
        self.cost = Counter(
            "agentd_llm_cost_usd",
            "USD spent on models, by the price table (turns on unpriced models add nothing).",
            ["agent", "model"],
            registry=r,
        )
        # The name before the unit was added (Prometheus: units in names); same values.
        self.cost_deprecated = Counter(
            "agentd_llm_cost",
            "Deprecated: agentd_llm_cost_usd_total under its old name (no unit).",
            ["agent", "model"],
            registry=r,
        )
        self.tool_calls = Counter(
            "agentd_tool_calls",
            "Tool call jobs finished, by outcome.",
            ["agent", "outcome"],
            registry=r,
        )
        self.tool_seconds = Histogram(
            "agentd_tool_call_duration_seconds",
            "Wall time of one tool call job (invocation, checkpoint and continuation).",
            ["agent", "outcome"],
            buckets=_TOOL_BUCKETS,
            registry=r,
        )
        self.mcp_client_errors = Counter(
            "agentd_mcp_client_errors",
            "MCP requests a server rejected as malformed by agentd (a client bug), by code.",
            ["server", "code"],
            registry=r,
        )
        self._watched = _Watched()
        r.register(self._watched)
        # Label children by (metric, values): prometheus_client's labels() validates and
        # locks on every call, a few times per job. Nothing here removes a child.
        self._children: dict[tuple[object, ...], Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def watch(self, **sources: object) -> None:
        """Read these at scrape time: `pool`, `renewer`, `reaper`, `worker`."""
        for name, value in sources.items():
            setattr(self._watched, name, value)

    # --- pipelines note outcomes (first one wins); the worker's scope records them -------

    def turn_outcome(self, ctx: TurnNoted, outcome: TurnOutcome) -> None:
        if ctx.outcome is None:
            ctx.outcome = outcome

    def tool_call_outcome(self, ctx: ToolNoted, outcome: ToolCallOutcome) -> None:
        if ctx.outcome is None:
            ctx.outcome = outcome

    def mcp_client_error(self, *, server: str, code: int) -> None:
        self.mcp_client_errors.labels(server=server, code=str(code)).inc()

    def llm_attempts(self, ctx: TurnNoted, exchanges: Iterable[WireExchange]) -> None:
        model = model_of(ctx)
        for ex in exchanges:
            self._child(self.requests, model, _status_of(ex)).inc()
            if ex.retry_delay is not None:
                self._child(self.retries, _status_of(ex)).inc()

    def llm_cost(self, *, agent: str, model: str | None, cost: Decimal) -> None:
        """A committed turn's cost (a float here: metrics are not the ledger, loops.cost is)."""
        self._child(self.cost, agent, model or "unknown").inc(float(cost))
        self._child(self.cost_deprecated, agent, model or "unknown").inc(float(cost))

    # --- recorded once per job, by agentd.engine.scopes ----------------------------------

    def turn_finished(
        self,
        outcome: str,
        *,
        agent: str,
        model: str,
        seconds: float,
        ttft: float | None = None,
        usage: Usage | None = None,
    ) -> None:
        self._child(self.turns, agent, model, outcome).inc()
        self._child(self.turn_seconds, agent, outcome).observe(seconds)
        if ttft is not None:
            self._child(self.ttft, model).observe(ttft)
        if usage is not None:
            self._child(self.tokens, agent, model, "input").inc(usage.prompt_tokens)
            self._child(self.tokens, agent, model, "output").inc(usage.completion_tokens)

    def tool_call_finished(self, outcome: str, *, agent: str, seconds: float) -> None:
        self._child(self.tool_calls, agent, outcome).inc()
        self._child(self.tool_seconds, agent, outcome).observe(seconds)


class _Watched(Collector):
    """Counters and gauges other services keep, read when Prometheus scrapes."""

    pool: Any = None
    renewer: Any = None
    reaper: Any = None
    worker: Any = None

    def describe(self) -> Iterator[Metric]:
        return self._families(describing=True)

    def collect(self) -> Iterator[Metric]:
        return self._families(describing=False)

    def _families(self, *, describing: bool) -> Iterator[Metric]:
        renewals = CounterMetricFamily(
            "agentd_lease_renewals", "Heartbeat ticks that renewed this process's leases."
        )
        lost = CounterMetricFamily(
            "agentd_leases_lost", "Leases this process lost (token rotated, revoked, untrusted)."
        )
        age = GaugeMetricFamily(
            "agentd_heartbeat_age_seconds", "Seconds since the last successful heartbeat."
        )
        reaped = CounterMetricFamily(
            "agentd_reaper_actions",
            "Rows the reaper healed in this process, by case.",
            labels=["case"],
        )
        busy = GaugeMetricFamily(
            "agentd_worker_in_flight", "Turns (llm) and tool calls (tool) running here.",
            labels=["queue"],
        )  # fmt: skip
        slots = GaugeMetricFamily(
            "agentd_worker_slots", "Concurrency limit per queue in this process.", labels=["queue"]
        )
        conns = GaugeMetricFamily(
            "agentd_db_pool_connections", "Pooled database connections, by state.",
            labels=["state"],
        )  # fmt: skip
        conns_max = GaugeMetricFamily(
            "agentd_db_pool_max_connections", "Size limit of the database pool."
        )
        if not describing:
            if (r := self.renewer) is not None:
                renewals.add_metric([], r.renewal_count)
                lost.add_metric([], r.lost_count)
                if r.last_ok is not None:
                    age.add_metric([], time.monotonic() - r.last_ok)
            if self.reaper is not None:
                for case, n in asdict(self.reaper.totals).items():
                    reaped.add_metric([case], n)
            if (w := self.worker) is not None:
                for queue in w.queues:
                    busy.add_metric([queue], w.busy[queue])
                    slots.add_metric([queue], w.limits[queue])
            if (p := self.pool) is not None and hasattr(p, "get_idle_size"):
                size, idle = p.get_size(), p.get_idle_size()
                conns.add_metric(["in_use"], size - idle)
                conns.add_metric(["idle"], idle)
                conns_max.add_metric([], p.get_max_size())
        yield from (renewals, lost, age, reaped, busy, slots, conns, conns_max)

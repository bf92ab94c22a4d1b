"""Metrics and traces for one agentd process (see docs/observability.md); the log context
and span of one job are `agentd.engine.scopes`."""

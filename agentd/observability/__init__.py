"""Metrics, traces and log context for one agentd process (see docs/observability.md)."""

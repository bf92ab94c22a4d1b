"""The builder as the pipeline names it: `agentd.builder`, re-exported for the stacks and
middlewares (`Handler` is the type each middleware wraps)."""

from __future__ import annotations

from agentd.builder import Builder, Handler, Spec

__all__ = ["Builder", "Handler", "Spec"]

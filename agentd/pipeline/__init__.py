"""Middleware pipelines for the LLM turn and the tool call: the default stacks and the
middlewares. Their builder is `agentd.builder` (re-exported as `pipeline.builder`), one
floor down, since `agentd.Agent`'s configure hooks take it."""

"""Middleware pipelines for the LLM turn and the tool call, and their builder."""

"""LLM layer: client, retries, SSE aggregation and the open_ai / anthropic / gemini dialects."""

"""The LLM turn pipeline's middlewares, one per module, named as in the reference, and the
helpers only the LLM turn uses (prompt, tokens, costs, provider limits, deferral)."""

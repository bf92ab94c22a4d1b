"""The LLM turn pipeline's middlewares, one per module, named as in the reference."""

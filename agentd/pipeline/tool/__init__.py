"""The tool call pipeline's middlewares, one per module, named as in the reference."""

"""Dialect registry: `get_dialect("open_ai" | "anthropic" | "gemini")`."""

from __future__ import annotations

from agentd.errors import ConfigError
from agentd.llm.dialects import anthropic, gemini, open_ai
from agentd.llm.dialects.base import Dialect

_DIALECTS: dict[str, Dialect] = {
    "open_ai": open_ai.OpenAI(),
    "anthropic": anthropic.Anthropic(),
    "gemini": gemini.Gemini(),
}
NAMES = tuple(_DIALECTS)


def get_dialect(name: str) -> Dialect:
    try:
        return _DIALECTS[name.lstrip(":")]
    except KeyError:
        raise ConfigError(f"unknown LLM dialect {name!r}; known: {', '.join(NAMES)}") from None

"""Model prices and what a turn cost: USD per million tokens, exact decimals (never float).

The built-in table is indicative: list prices as published by the providers on
PRICES_AS_OF, standard tier, no batch or regional discounts, no long-context surcharges.
Override it per model (`[prices."MODEL"]`) or per agent (`[agents.NAME.prices]`); see
docs/configuration.md. A model found nowhere has no price, and its turns no cost (None,
never 0).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

PRICES_AS_OF = "2025-11-01"
MILLION = Decimal(1_000_000)
#: Costs are kept to 1e-10 USD, the scale of the loops.cost column (numeric(20, 10)).
QUANTUM = Decimal("1e-10")
# A price entry also covers its dated or versioned snapshots: "gpt-4o" prices
# "gpt-4o-2024-08-06", "claude-sonnet-4" prices "claude-sonnet-4-20250514", but not
# "o3-pro" for "o3" (a different model is unknown, not mispriced).
_SNAPSHOT = re.compile(r"^-(\d|latest$)")


@dataclass(frozen=True)
class Price:
    """USD per million tokens. `cached_input` defaults to `input`, `reasoning` to
    `output` (every provider bills reasoning as output tokens)."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    reasoning: Decimal | None = None

    @classmethod
    def of(cls, raw: Price | Mapping[str, Any]) -> Price:
        if isinstance(raw, Price):
            return raw
        return cls(
            input=_dec(raw["input"]),
            output=_dec(raw["output"]),
            cached_input=_dec(raw["cached_input"]) if raw.get("cached_input") is not None else None,
            reasoning=_dec(raw["reasoning"]) if raw.get("reasoning") is not None else None,
        )

    def cost(self, *, prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> Decimal:
        """What a call cost. Counts as the dialects report them: `cached` is part of
        `prompt`, `reasoning` part of `completion` (llm/types.py Usage)."""
        cached = min(max(cached, 0), max(prompt, 0))
        reasoning = min(max(reasoning, 0), max(completion, 0))
        total = (
            (prompt - cached) * self.input
            + cached * (self.cached_input if self.cached_input is not None else self.input)
            + (completion - reasoning) * self.output
            + reasoning * (self.reasoning if self.reasoning is not None else self.output)
        )
        return (total / MILLION).quantize(QUANTUM, rounding=ROUND_HALF_EVEN)


def _dec(value: object) -> Decimal:
    # str() first: Decimal(2.5) is exact but Decimal(0.1) is 0.1000000000000000055...
    if isinstance(value, bool):
        raise ValueError("a price is a number, not a boolean")
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _p(input: str, cached: str, output: str) -> Price:
    return Price(input=Decimal(input), cached_input=Decimal(cached), output=Decimal(output))


#: Indicative list prices (USD / 1M tokens: input, cached input, output) on PRICES_AS_OF.
BUILTIN: dict[str, Price] = {
    # OpenAI
    "gpt-5": _p("1.25", "0.125", "10"),
    "gpt-5-mini": _p("0.25", "0.025", "2"),
    "gpt-5-nano": _p("0.05", "0.005", "0.40"),
    "gpt-4.1": _p("2", "0.50", "8"),
    "gpt-4.1-mini": _p("0.40", "0.10", "1.60"),
    "gpt-4.1-nano": _p("0.10", "0.025", "0.40"),
    "gpt-4o": _p("2.50", "1.25", "10"),
    "gpt-4o-mini": _p("0.15", "0.075", "0.60"),
    "o3": _p("2", "0.50", "8"),
    "o3-mini": _p("1.10", "0.55", "4.40"),
    "o4-mini": _p("1.10", "0.275", "4.40"),
    # Anthropic (cached input = cache reads; cache writes are priced as input)
    "claude-opus-4-5": _p("5", "0.50", "25"),
    "claude-opus-4-1": _p("15", "1.50", "75"),
    "claude-opus-4": _p("15", "1.50", "75"),
    "claude-sonnet-4-5": _p("3", "0.30", "15"),
    "claude-sonnet-4": _p("3", "0.30", "15"),
    "claude-3-7-sonnet": _p("3", "0.30", "15"),
    "claude-haiku-4-5": _p("1", "0.10", "5"),
    "claude-3-5-haiku": _p("0.80", "0.08", "4"),
    # Google (prompts up to 200k tokens)
    "gemini-2.5-pro": _p("1.25", "0.125", "10"),
    "gemini-2.5-flash": _p("0.30", "0.03", "2.50"),
    "gemini-2.5-flash-lite": _p("0.10", "0.01", "0.40"),
    "gemini-2.0-flash": _p("0.10", "0.025", "0.40"),
}


def _find(table: Mapping[str, Price], model: str) -> Price | None:
    if model in table:
        return table[model]
    covering = [n for n in table if model.startswith(n) and _SNAPSHOT.match(model[len(n) :])]
    return table[max(covering, key=len)] if covering else None


def _names(model: str) -> list[str]:
    # "models/gemini-2.5-pro" (Gemini) and "openai/gpt-4o" (routers) name the same model.
    low = model.strip().lower()
    tail = low.rsplit("/", 1)[-1]
    return [low] if tail == low else [low, tail]


def lookup(
    models: list[str | None],
    *,
    agent_price: Price | None = None,
    configured: Mapping[str, Price] | None = None,
) -> Price | None:
    """The price of a call: the agent's own, else the first of `models` (the model the
    agent asked for, then the one the provider reported) found in the configured table,
    else in the built-in one. None: unknown."""
    if agent_price is not None:
        return agent_price
    names = [n for m in models if m for n in _names(m)]
    for table in (
        {k.lower(): v for k, v in (configured or {}).items()},
        BUILTIN,
    ):
        for name in names:
            price = _find(table, name)
            if price is not None:
                return price
    return None


def money(value: Decimal | None) -> str | None:
    """A cost as the API shows it: a plain decimal string, no exponent, no trailing zeros."""
    if value is None:
        return None
    text = format(value.normalize(), "f")
    return text if value else "0"

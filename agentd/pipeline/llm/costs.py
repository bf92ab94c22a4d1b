"""Cost and speed accounting of a model call.

Guarantee: every finalized turn gets a TurnCost: its cost (an exact decimal, or None when
no price is known for its model: never a made-up 0), its reasoning tokens, its speed
(output tokens per second of generation) and the seconds and tokens that speed counts.
Tolerates: any agent attribute shape (plain values or properties, prices as a mapping).
Never: touches the database; the finalizers write what it computes (in their statement).
Called by: ResponseParsing and Compaction (the loop's cost budget, checked before the model
is called: engine/loop_limits.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from agentd.errors import ConfigError
from agentd.llm import prices
from agentd.llm.types import LLMRequest, LLMResponse
from agentd.pipeline.llm.tokens import TurnTokens
from agentd.settings import Settings


@dataclass(frozen=True)
class TurnCost:
    cost: Decimal | None  # None: no price for the model
    model: str | None  # the model the agent asked for (bounded: a metric label)
    tokens_reasoning: int
    tps: float | None  # output tokens per second of generation
    generation_seconds: float | None  # None: not counted in the loop's tps

    def usage_metadata(self) -> dict[str, Any]:
        """The message's `metadata.usage` (the cost as a decimal string: exact in JSON)."""
        return {
            "cost": prices.money(self.cost),
            "model": self.model,
            "tokens_reasoning": self.tokens_reasoning,
            "tps": self.tps,
            "generation_seconds": self.generation_seconds,
        }


def _agent_price(agent: object) -> prices.Price | None:
    raw = getattr(agent, "prices", None)
    if raw is None:
        return None
    try:
        return prices.Price.of(raw)
    except (KeyError, TypeError, ValueError, InvalidOperation) as exc:
        raise ConfigError(
            f"agent {getattr(agent, 'name', '')!r}: prices must give input and output "
            f"(USD per million tokens), got {raw!r}"
        ) from exc


def price_for(
    settings: Settings, agent: object, request: LLMRequest | None, resp: LLMResponse
) -> prices.Price | None:
    configured = {
        name: prices.Price.of(cfg.model_dump(exclude_none=True))
        for name, cfg in settings.prices.items()
    }
    asked = request.provider.model if request is not None else getattr(agent, "model", None)
    return prices.lookup(
        [asked if isinstance(asked, str) else None, resp.model],
        agent_price=_agent_price(agent),
        configured=configured,
    )


def speed(completion: int, resp: LLMResponse) -> tuple[float | None, float | None]:
    """(tps, generation seconds). Streamed: from the first token to the end; not
    streamed: the whole call (the answer arrives at once, so prefill is included)."""
    seconds = resp.duration
    if resp.ttft is not None and resp.duration > resp.ttft:
        seconds = resp.duration - resp.ttft
    if completion <= 0 or seconds <= 0:
        return None, None
    return completion / seconds, seconds


def of_turn(
    settings: Settings,
    agent: object,
    request: LLMRequest | None,
    resp: LLMResponse,
    used: TurnTokens,
) -> TurnCost:
    u = resp.usage
    reasoning = u.reasoning_tokens if u is not None and not used.estimated else 0
    price = price_for(settings, agent, request, resp)
    cost = (
        price.cost(
            prompt=used.prompt, completion=used.completion, cached=used.cached, reasoning=reasoning
        )
        if price is not None
        else None
    )
    tps, seconds = speed(used.completion, resp)
    asked = request.provider.model if request is not None else None
    return TurnCost(
        cost=cost,
        model=asked or resp.model,
        tokens_reasoning=reasoning,
        tps=tps,
        generation_seconds=seconds,
    )

"""A loop's own limits — steps, tokens, cost — their checks, and raising them on resume.

Guarantee: a loop's limit is its state's `max_steps` / `max_tokens_total` (a positive
integer) or `max_cost` (a positive decimal, USD) when set, else its agent's; a raise always
leaves room for at least one more turn.
Tolerates: state written by a user at start (the same keys, the same meaning); any agent
attribute shape (plain values or properties).
Never: writes; `Lifecycle.resume` merges what `raised` returns under the loop lock.
Called by: pipeline.llm (NetworkCalling, Compaction), engine.lifecycle, admin.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from agentd.errors import BadRequest, CostBudgetExceeded, TokenBudgetExceeded
from agentd.llm import prices
from agentd.store.models import Loop


def _positive(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def max_steps(agent: object, loop: Loop) -> int | None:
    """The loop's step limit: loop state `max_steps`, else the agent's."""
    own = _positive(loop.state.get("max_steps")) if isinstance(loop.state, dict) else None
    return own if own is not None else _positive(getattr(agent, "max_steps", None))


def at_max_steps(agent: object, loop: Loop) -> bool:
    limit = max_steps(agent, loop)
    return limit is not None and loop.step_count >= limit


def raised(
    loop: Loop,
    *,
    max_steps: int | None,
    max_tokens_total: int | None,
    max_cost: Decimal | None = None,
) -> dict[str, int | str]:
    """The state patch that sets the loop's own limits; BadRequest for a limit the loop has
    already used up (resuming would only pause it again)."""
    patch: dict[str, int | str] = {}
    if max_steps is not None:
        if max_steps <= loop.step_count:
            raise BadRequest(
                f"max_steps must exceed the loop's step_count ({loop.step_count}); got {max_steps}"
            )
        patch["max_steps"] = max_steps
    if max_tokens_total is not None:
        used = tokens_spent(loop)
        if max_tokens_total <= used:
            raise BadRequest(
                f"max_tokens_total must exceed the tokens the loop has spent ({used}); "
                f"got {max_tokens_total}"
            )
        patch["max_tokens_total"] = max_tokens_total
    if max_cost is not None:
        spent = loop.cost or Decimal(0)
        if not max_cost.is_finite() or max_cost <= spent:
            raise BadRequest(
                f"max_cost must exceed what the loop has spent ({prices.money(spent)} USD); "
                f"got {max_cost}"
            )
        # A decimal string, as a start request's max_cost is kept: exact, never a float.
        patch["max_cost"] = format(max_cost.normalize(), "f")
    return patch


def token_budget(agent: object, loop: Loop) -> int | None:
    """The loop's token budget: loop state `max_tokens_total`, else the agent's."""
    override = loop.state.get("max_tokens_total") if isinstance(loop.state, dict) else None
    if isinstance(override, int) and not isinstance(override, bool) and override > 0:
        return override
    return agent_token_budget(agent)


def agent_token_budget(agent: object) -> int | None:
    """The agent's own token budget (`max_tokens_total`), whatever its loop's state says."""
    value = getattr(agent, "max_tokens_total", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def tokens_spent(loop: Loop) -> int:
    return loop.tokens_prompt + loop.tokens_completion


def check_token_budget(agent: object, loop: Loop) -> None:
    """Before a turn calls the model: raise TokenBudgetExceeded once the budget is spent."""
    limit = token_budget(agent, loop)
    if limit is not None and tokens_spent(loop) >= limit:
        raise TokenBudgetExceeded(
            f"token budget (max_tokens_total {limit}) reached: {tokens_spent(loop)} tokens spent"
        )


def _positive_decimal(value: object) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        d = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return d if d.is_finite() and d > 0 else None


def cost_budget(agent: object, loop: Loop) -> Decimal | None:
    """The loop's cost budget in USD: loop state `max_cost`, else the agent's."""
    override = loop.state.get("max_cost") if isinstance(loop.state, dict) else None
    return _positive_decimal(override) or agent_cost_budget(agent)


def agent_cost_budget(agent: object) -> Decimal | None:
    """The agent's own cost budget in USD (`max_cost`), whatever its loop's state says."""
    return _positive_decimal(getattr(agent, "max_cost", None))


def check_cost_budget(agent: object, loop: Loop) -> None:
    """Before a turn calls the model: raise CostBudgetExceeded once the budget is spent."""
    limit = cost_budget(agent, loop)
    if limit is not None and loop.cost is not None and loop.cost >= limit:
        raise CostBudgetExceeded(
            f"cost budget (max_cost {prices.money(limit)} USD) reached: "
            f"{prices.money(loop.cost)} USD spent"
        )

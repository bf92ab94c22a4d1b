"""GET /v1/costs: what each agent's loops cost, by model, over a window of start times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request

from agentd.api import problems
from agentd.api.problems import ApiProblem
from agentd.api.routes_loops import app_state
from agentd.api.schemas import (
    AgentCostOut,
    CleanStr,
    CostsOut,
    IsoDatetime,
    ModelCostOut,
    Tokens,
)
from agentd.db.pool import connection
from agentd.store import loop_reports, messages

router = APIRouter(tags=["costs"])

DEFAULT_WINDOW = timedelta(hours=24)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@router.get(
    "/costs", summary="Cost per agent and model", responses=problems.responses(400, 401, 422)
)
async def costs(
    request: Request,
    since: Annotated[
        IsoDatetime | None, Query(description="Loops created at or after (default: 24 h ago).")
    ] = None,
    until: Annotated[
        IsoDatetime | None, Query(description="Loops created before (default: now).")
    ] = None,
    agent: Annotated[CleanStr | None, Query(max_length=200, description="One agent only.")] = None,
) -> CostsOut:
    """Loops are attributed to the window by their creation time, with everything they
    spent so far. Costs are exact decimal strings in USD, from the price table
    (docs/configuration.md); a null cost means no turn had a known price."""
    end = _aware(until) if until is not None else datetime.now(UTC)
    start = _aware(since) if since is not None else end - DEFAULT_WINDOW
    if start >= end:
        raise ApiProblem(400, "`since` must be before `until`", problem_type="invalid-window")
    state = app_state(request)
    async with connection(state.pool) as conn:
        per_agent = await loop_reports.cost_by_agent(conn, since=start, until=end, agent=agent)
        per_model = await messages.cost_by_model(conn, since=start, until=end, agent=agent)
    models: dict[str, list[ModelCostOut]] = {}
    for r in per_model:
        models.setdefault(r["agent"], []).append(
            ModelCostOut(
                model=r["model"],
                cost=r["cost"],
                turns=r["turns"],
                unpriced_turns=r["unpriced_turns"],
            )
        )
    return CostsOut(
        since=start,
        until=end,
        agents=[
            AgentCostOut(
                agent=r["agent"],
                cost=r["cost"],
                loops=r["loops"],
                unpriced_turns=r["unpriced_turns"],
                tokens=Tokens(
                    prompt=r["tokens_prompt"],
                    completion=r["tokens_completion"],
                    cached=r["tokens_cached"],
                    reasoning=r["tokens_reasoning"],
                    estimated=False,
                ),
                models=models.get(r["agent"], []),
            )
            for r in per_agent
        ],
    )

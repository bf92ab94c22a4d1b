"""The demo's agent: a travel planner with four tools, one of them gated by approval."""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

from agentd import Agent, CallContext, Toolset

travel = Toolset("travel", instructions="Tools to plan and book a trip.")


@travel.tool(description="Find flights between two cities on a date")
async def find_flights(origin: str, destination: str, date: str) -> dict[str, Any]:
    await asyncio.sleep(0.8)
    return {
        "flights": [
            {"id": "AG101", "from": origin, "to": destination, "date": date, "price_eur": 212},
            {"id": "AG205", "from": origin, "to": destination, "date": date, "price_eur": 189},
        ]
    }


@travel.tool(description="Find hotels in a city for a number of nights")
async def find_hotels(city: str, nights: int) -> dict[str, Any]:
    await asyncio.sleep(2.5)  # slow on purpose: the demo kills its worker during this call
    return {
        "hotels": [
            {"id": "H-CANAL", "city": city, "nights": nights, "price_eur": 95 * nights},
            {"id": "H-PARK", "city": city, "nights": nights, "price_eur": 120 * nights},
        ]
    }


@travel.tool(description="Exchange rate between two currencies")
async def exchange_rate(base: str, quote: str) -> dict[str, Any]:
    await asyncio.sleep(0.3)
    return {"base": base, "quote": quote, "rate": 1.08}


@travel.tool(
    description="Book a flight and a hotel (needs a person's approval)", requires_approval=True
)
async def book_trip(flight: str, hotel: str, ctx: CallContext) -> dict[str, Any]:
    # The idempotency key is stable across retries: a real booking API would dedupe on it.
    ref = hashlib.sha256((ctx.idempotency_key or "").encode()).hexdigest()[:6].upper()
    return {"confirmation": f"AGD-{ref}", "flight": flight, "hotel": hotel}


class TripAgent(Agent):
    system_prompt = (
        "You are a travel planner. Use the tools to compare options, then book "
        "the cheapest flight and hotel, and summarise the plan."
    )
    streaming = True
    mcps = [{"name": "travel", "toolset": travel}]

    @property
    def base_url(self) -> str:  # type: ignore[override]
        return str(self.state["llm"])

    @property
    def model(self) -> str:  # type: ignore[override]
        return str(self.state.get("model", "demo-model"))

    @property
    def api_token(self) -> str | None:  # type: ignore[override]
        env = self.state.get("api_key_env")
        return os.environ.get(str(env)) if env else None

"""The scripted fake model the demo talks to (a real endpoint can replace it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentd.testing.fake_llm import FakeLLM, LastMessage, Reply, Rule, ToolCall

SUMMARY = (
    "Here is your trip to Lisbon:\n"
    "- Flight AG205 on 2026-12-12, 189 EUR (the cheaper of two).\n"
    "- Hotel H-CANAL, 3 nights, 285 EUR.\n"
    "- Total 474 EUR (about 512 USD at 1.08).\n"
    "Booked and confirmed; the confirmation code is in the tool result above."
)


def _after(tool: str) -> Callable[[Any], bool]:
    return lambda last: last.role == "tool" and last.tool_name == tool


def _researched(last: LastMessage) -> bool:
    return last.role == "tool" and last.tool_name != "book_trip"


def script(fake: FakeLLM) -> None:
    fake.add(
        Rule(
            match=lambda last: last.role == "user",
            reply=Reply(
                content="Let me compare flights, hotels and the exchange rate at once.",
                tool_calls=[
                    ToolCall(
                        "find_flights",
                        {"origin": "Berlin", "destination": "Lisbon", "date": "2026-12-12"},
                    ),
                    ToolCall("find_hotels", {"city": "Lisbon", "nights": 3}),
                    ToolCall("exchange_rate", {"base": "EUR", "quote": "USD"}),
                ],
                chunk_size=4,
                chunk_delay=0.03,
            ),
        )
    )
    fake.add(
        Rule(
            match=_after("book_trip"), reply=Reply(content=SUMMARY, chunk_size=5, chunk_delay=0.02)
        )
    )
    fake.add(
        Rule(
            match=_researched,
            reply=Reply(
                content="AG205 and H-CANAL are the cheapest. Booking them now.",
                tool_calls=[ToolCall("book_trip", {"flight": "AG205", "hotel": "H-CANAL"})],
                chunk_size=4,
                chunk_delay=0.03,
            ),
        )
    )

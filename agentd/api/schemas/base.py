"""The pieces every REST body shares: cleaned text, strict numbers, date-times, money,
the request base (`_In`: unknown keys refused), a page of items and token counts."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, Strict

from agentd.api import hygiene
from agentd.llm import prices

T = TypeVar("T")


# Input cleaning (NUL, lone surrogates, non-finite numbers, deep nesting) lives in
# api/hygiene.py, shared with the admin forms; these names are its pydantic types.
CleanStr = hygiene.CleanStr
NonBlank = hygiene.NonBlank
JsonObject = hygiene.JsonObject
# The former names of the two checks, for callers that validate a body by hand.
_clean_text = hygiene.check_text
_clean_json = hygiene.check_json


def _not_a_number(value: T) -> T:
    # pydantic also reads a number ("0.5") as a unix timestamp; the schema says date-time
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            float(value)
        except ValueError:
            return value
        raise ValueError("must be an ISO 8601 date-time (like 2026-01-31T12:00:00Z)")
    return value


#: A date-time in a query parameter: ISO 8601 text only.
IsoDatetime = Annotated[datetime, BeforeValidator(_not_a_number)]

#: Booleans and integers are strict: `0` is not `false`, `true` is not `1`, `"5"` is not 5.
Bool = Annotated[bool, Strict()]
Int = Annotated[int, Strict()]
#: A cost budget in USD: a number or a decimal string, above 0, finite, at most 1e9.
Usd = Annotated[Decimal, Field(gt=0, le=Decimal("1e9"), allow_inf_nan=False)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(
        None, description="Pass back to get the next page; null on the last page."
    )


# Money is an exact decimal; JSON carries it as a string ("0.0125", USD) so no client
# parses it into a float on the way in.
Money = Annotated[Decimal, PlainSerializer(prices.money, return_type=str, when_used="json")]


class Tokens(BaseModel):
    prompt: int
    completion: int
    cached: int
    reasoning: int = Field(0, description="Reasoning tokens: part of `completion`.")
    estimated: bool = Field(
        False, description="Some counts are chars/4 estimates: the provider sent no usage."
    )

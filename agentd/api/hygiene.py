"""Input cleaning: the one set of rules for what a person or client may send, for both faces.

The REST API applies them through the pydantic types below (`CleanStr`, `NonBlank`,
`JsonObject`: a 422 naming the field); the admin forms call the same functions
(`agentd.admin.forms`: a 422 form error page). Refused, never silently altered:

- NUL (U+0000) and lone surrogates (U+D800 to U+DFFF) in any text or JSON string or key:
  PostgreSQL cannot store them faithfully (`agentd.db.storable` would have to replace them);
- non-finite numbers (`NaN`, `Infinity`, `1e400`) anywhere in JSON: JSON has no such
  value and `jsonb` refuses them;
- JSON nested deeper than `MAX_DEPTH`: deeper documents only ever come from an attack, and
  every recursive walk over them (ours, the driver's, the json module's) risks a
  RecursionError, which used to surface as a 500.

Model output and tool results are not input: they are made storable at the driver edge
(`agentd.db.storable`) instead, so a paid completion is never lost.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, NoReturn, TypeVar

from pydantic import AfterValidator, Field

from agentd.json_types import JSONValue

T = TypeVar("T")

#: Deepest nesting of objects and arrays accepted in a JSON value (a flat object is 1).
MAX_DEPTH = 64


class Unclean(ValueError):
    """Input that breaks a cleaning rule; the message says which (pydantic shows it)."""


def check_text(value: str) -> str:
    """`value` unchanged, or Unclean when it holds NUL or a lone surrogate."""
    if "\x00" in value:
        raise Unclean("must not contain NUL (\\u0000) characters")
    if not value.isascii():  # O(1) in CPython; only non-ASCII text can hold a surrogate
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Unclean("must be valid Unicode (no lone surrogates)") from None
    return value


def check_json(value: T) -> T:
    """`value` unchanged, or Unclean naming the rule it breaks (see the module docstring).

    Iterative, so a deep document is refused by the depth rule, never by a RecursionError.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            check_text(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise Unclean("must not contain non-finite numbers (NaN, Infinity, 1e400)")
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                raise Unclean(f"must not be nested more than {MAX_DEPTH} levels deep")
            if isinstance(item, dict):
                for k, v in item.items():
                    if isinstance(k, str):
                        check_text(k)
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in item)
    return value


def _refuse_constant(name: str) -> NoReturn:
    raise Unclean(f"must not contain non-finite numbers (got {name})")


def parse_json(text: str) -> JSONValue:
    """JSON text from a form field, checked by `check_json`.

    Raises Unclean for a rule broken (the `NaN`/`Infinity` tokens Python would otherwise
    accept, a depth the parser cannot even reach) and plain ValueError for bad syntax.
    """
    try:
        value = json.loads(check_text(text), parse_constant=_refuse_constant)
    except RecursionError:
        raise Unclean(f"must not be nested more than {MAX_DEPTH} levels deep") from None
    return check_json(value)


def _check_object(value: dict[str, Any]) -> dict[str, Any]:
    return check_json(value)


CleanStr = Annotated[str, AfterValidator(check_text)]
NonBlank = Annotated[
    str, Field(min_length=1, pattern=r"\S", max_length=1_000_000), AfterValidator(check_text)
]
JsonObject = Annotated[dict[str, Any], AfterValidator(_check_object)]

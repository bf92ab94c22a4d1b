"""Approve with edits: a person's arguments for a parked call, checked against the tool.

Guarantee: arguments that reach the tool_calls row are a JSON object valid against the
tool's advertised inputSchema (JSON Schema 2020-12, as MCP specifies); otherwise
ToolArgumentsInvalid (422) names every failing path as a JSON Pointer.
Tolerates: a tool without a usable schema (its call is checked only for being an object).
Never: touches the database (Lifecycle.decide does, under the loop lock).
Called by: Lifecycle.decide.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jsonschema

from agentd.errors import ToolArgumentsInvalid

MAX_ERRORS = 20


def pointer(path: Iterable[object]) -> str:
    """A jsonschema error path as a JSON Pointer (RFC 6901): "" is the whole object."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def check(name: str, schema: dict[str, Any] | None, arguments: Any) -> dict[str, Any]:
    if not isinstance(arguments, dict):
        raise ToolArgumentsInvalid(
            f"arguments for {name} must be a JSON object",
            errors=[{"path": "", "message": "must be an object"}],
        )
    if not schema:
        return arguments
    try:
        validator = jsonschema.Draft202012Validator(schema)
        found = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    except (jsonschema.SchemaError, TypeError, ValueError):
        # The server advertised a schema jsonschema cannot use: nothing to check against.
        return arguments
    if found:
        errors = [
            {"path": pointer(e.absolute_path), "message": e.message} for e in found[:MAX_ERRORS]
        ]
        first = errors[0]
        raise ToolArgumentsInvalid(
            f"arguments for {name} do not match its input schema: "
            f"{first['path'] or '(root)'}: {first['message']}",
            errors=errors,
        )
    return arguments

"""Answers to MCP input requests: validation and the stored shape the retry carries.

A 2026-07-28 server that needs input answers `tools/call` with an InputRequiredResult:
`{"inputRequests": {key: {"method": "elicitation/create", "params": {...}}},
"requestState": ...}`. ToolExecution stores that on the call (`input_request`); a person
answers each key with accept (plus `content` matching the requested schema), decline or
cancel; `build_response` turns the answer into the `input_response` the retry sends as
`params.inputResponses` / `params.requestState`.
Never: touches the database (Lifecycle.answer_input does, under the loop lock).
"""

from __future__ import annotations

from typing import Any, NoReturn

import jsonschema

from agentd.errors import InputAnswerInvalid

ACTIONS = ("accept", "decline", "cancel")


def describe(request: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The pending input requests, one entry per key, as the API lists them."""
    out: list[dict[str, Any]] = []
    for key, item in sorted(((request or {}).get("inputRequests") or {}).items()):
        params = (item or {}).get("params") or {}
        out.append(
            {
                "key": key,
                "method": (item or {}).get("method"),
                "mode": params.get("mode") or ("url" if params.get("url") else "form"),
                "message": params.get("message"),
                "requested_schema": params.get("requestedSchema"),
                "url": params.get("url"),
            }
        )
    return out


def build_response(
    request: dict[str, Any] | None,
    *,
    action: str | None,
    content: dict[str, Any] | None,
    responses: dict[str, dict[str, Any]] | None,
) -> dict[str, Any]:
    """The `input_response` to store, or InputAnswerInvalid naming the offending field."""
    pending = {r["key"]: r for r in describe(request)}
    if responses is None:
        if action is None:
            _fail("action", "give an action (accept, decline or cancel) or responses")
        if len(pending) > 1 and action == "accept":
            _fail(
                "responses",
                f"this call asked for {len(pending)} inputs ({', '.join(pending)}); "
                "answer each one under responses",
            )
        responses = {key: {"action": action, "content": content} for key in pending}
        prefix = {key: "" for key in pending}
    else:
        if action is not None or content is not None:
            _fail("action", "give either action/content or responses, not both")
        prefix = {key: f"responses.{key}." for key in responses}
        for key in pending:
            if key not in responses:
                _fail(f"responses.{key}", "no answer for this input request")
        for key in responses:
            if key not in pending:
                _fail(f"responses.{key}", f"the server asked for no input named {key!r}")
    answers: dict[str, Any] = {}
    for key, answer in responses.items():
        answers[key] = _one(pending[key], answer, prefix[key])
    return {
        "inputResponses": answers,
        "requestState": (request or {}).get("requestState"),
    }


def _one(pending: dict[str, Any], answer: dict[str, Any], prefix: str) -> dict[str, Any]:
    action = answer.get("action")
    content = answer.get("content")
    if action not in ACTIONS:
        _fail(f"{prefix}action", "must be accept, decline or cancel")
    if action != "accept":
        if content:
            _fail(f"{prefix}content", "only an accepted answer carries content")
        return {"action": action}
    if pending["mode"] == "url":
        if content:
            _fail(f"{prefix}content", "a URL request is answered without content")
        return {"action": "accept"}
    if not isinstance(content, dict):
        _fail(f"{prefix}content", "an accepted answer needs content (an object)")
    schema = pending.get("requested_schema") or {"type": "object"}
    errors = []
    try:
        validator = jsonschema.Draft202012Validator(schema)
        found = sorted(validator.iter_errors(content), key=lambda e: list(e.absolute_path))
    except jsonschema.SchemaError:
        found = []  # the server's schema is broken; let the server judge the answer
    for err in found:
        if err.validator == "required" and isinstance(err.validator_value, list):
            missing = [p for p in err.validator_value if p not in (err.instance or {})]
            for name in missing:
                errors.append({"field": f"{prefix}content.{name}", "message": "is required"})
            continue
        where = ".".join(str(p) for p in err.absolute_path)
        field = f"{prefix}content.{where}" if where else f"{prefix}content"
        errors.append({"field": field, "message": err.message})
    if errors:
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        raise InputAnswerInvalid(detail[:2000], errors=errors[:50])
    return {"action": "accept", "content": content}


def _fail(field: str, message: str) -> NoReturn:
    raise InputAnswerInvalid(f"{field}: {message}", errors=[{"field": field, "message": message}])

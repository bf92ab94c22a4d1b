"""Wrap a decorated tool/prompt function: derive a schema, validate, call off-loop."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, get_type_hints

import jsonschema
import pydantic

from agentd.errors import ToolArgumentsInvalid
from agentd.mcp.port import CallContext

_CTX_NAMES = ("ctx", "context")


def _is_ctx(param: inspect.Parameter, hints: dict[str, Any]) -> bool:
    hint = hints.get(param.name, param.annotation)
    if hint is CallContext or (isinstance(hint, str) and hint.endswith("CallContext")):
        return True
    return param.name in _CTX_NAMES


class Handler:
    """A user function plus how to feed it.

    Derived mode (no explicit schema): keyword arguments are validated by a pydantic model
    built from the annotations. Raw mode (explicit schema, or prompts): the function's first
    parameter gets the string-keyed arguments dict, validated with JSON Schema.
    A parameter named `ctx`/`context` or annotated `CallContext` gets the call context.
    """

    def __init__(
        self, fn: Callable[..., Any], *, input_schema: dict[str, Any] | None, raw: bool
    ) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        signature = inspect.signature(fn)
        try:
            hints = get_type_hints(fn)
        except Exception:  # unresolvable forward refs: fall back to raw annotations
            hints = {}
        params = list(signature.parameters.values())
        self.ctx_name = next((p.name for p in params if _is_ctx(p, hints)), None)
        others = [p for p in params if p.name != self.ctx_name]
        self.raw = raw or input_schema is not None
        self.model: type[pydantic.BaseModel] | None = None
        if self.raw:
            self.args_name = others[0].name if others else None
            self.ctx_positional = self.ctx_name is None and len(others) >= 2
            if self.ctx_positional:
                self.ctx_name = others[1].name
            self.schema = input_schema or {"type": "object"}
            jsonschema.Draft202012Validator.check_schema(self.schema)
            self._validator = jsonschema.Draft202012Validator(self.schema)
        else:
            fields: dict[str, Any] = {}
            for p in others:
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    raise TypeError(f"{fn.__name__}: *args/**kwargs cannot become a tool schema")
                hint = hints.get(p.name, Any if p.annotation is p.empty else p.annotation)
                default = ... if p.default is p.empty else p.default
                fields[p.name] = (hint, default)
            self.model = pydantic.create_model(f"{fn.__name__}Arguments", **fields)
            schema = self.model.model_json_schema()
            schema.pop("title", None)
            schema.setdefault("properties", {})
            self.schema = schema

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Keyword arguments for the function; ToolArgumentsInvalid names the bad field."""
        if self.model is None:
            errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
            if errors:
                parts = []
                for err in errors:
                    where = ".".join(str(p) for p in err.absolute_path) or "arguments"
                    parts.append(f"{where}: {err.message}")
                raise ToolArgumentsInvalid("; ".join(parts))
            return {self.args_name: arguments} if self.args_name else {}
        try:
            parsed = self.model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            parts = []
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"]) or "arguments"
                parts.append(f"{where}: {err['msg']}")
            raise ToolArgumentsInvalid("; ".join(parts)) from exc
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    async def call(self, kwargs: dict[str, Any], ctx: CallContext) -> Any:
        if self.ctx_name:
            kwargs = {**kwargs, self.ctx_name: ctx}
        if self.is_async:
            return await self.fn(**kwargs)
        # Sync handlers may block (DB drivers, requests): keep them off the event loop.
        result = await asyncio.to_thread(self.fn, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

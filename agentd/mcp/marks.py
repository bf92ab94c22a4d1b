"""`agentd.tool` / `agentd.prompt`: mark module-level functions for `Toolset.include`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, overload

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: Where `tool` / `prompt` leave their options on a function, for `Toolset.include`.
TOOL_MARK = "__agentd_tool__"
PROMPT_MARK = "__agentd_prompt__"

F = TypeVar("F", bound=Callable[..., Any])


class ToolOptions(TypedDict, total=False):
    """What `agentd.tool(...)` may say: the keyword arguments of `Toolset.tool`."""

    name: str | None
    description: str | None
    input_schema: dict[str, Any] | None
    requires_approval: bool


class PromptOptions(TypedDict, total=False):
    """What `agentd.prompt(...)` may say: the keyword arguments of `Toolset.prompt`."""

    name: str | None
    description: str | None
    arguments: list[dict[str, Any]] | None


@overload
def tool(fn: F, **options: Unpack[ToolOptions]) -> F: ...
@overload
def tool(fn: None = None, **options: Unpack[ToolOptions]) -> Callable[[F], F]: ...
def tool(fn: F | None = None, **options: Unpack[ToolOptions]) -> F | Callable[[F], F]:
    """Mark a function as a tool for `Toolset.include` (options as for `Toolset.tool`)."""

    def mark(func: F) -> F:
        setattr(func, TOOL_MARK, options)
        return func

    return mark(fn) if fn is not None else mark


@overload
def prompt(fn: F, **options: Unpack[PromptOptions]) -> F: ...
@overload
def prompt(fn: None = None, **options: Unpack[PromptOptions]) -> Callable[[F], F]: ...
def prompt(fn: F | None = None, **options: Unpack[PromptOptions]) -> F | Callable[[F], F]:
    """Mark a function as a prompt for `Toolset.include` (options as for `Toolset.prompt`)."""

    def mark(func: F) -> F:
        setattr(func, PROMPT_MARK, options)
        return func

    return mark(fn) if fn is not None else mark

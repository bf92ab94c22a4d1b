"""The pipeline builder: an ordered list of lazy middleware specs, edited by class.

It lives on the ground floor, not in `pipeline/`, because `agent.py` (below the pipeline)
hands it to an agent's two configure hooks; it knows no context, stack or middleware.

Guarantee: a positional edit naming an absent middleware raises UnknownMiddleware;
`delete` is lenient; building never mutates the builder.
Never: instantiates a middleware before `build`.
Called by: pipeline.stacks (global configuration, then each agent's configure hook).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agentd.errors import UnknownMiddleware

C = TypeVar("C")
Handler = Callable[[C], Awaitable[None]]


@dataclass(frozen=True)
class Spec:
    cls: type
    kwargs: dict[str, Any] = field(default_factory=dict)


class Builder(Generic[C]):
    def __init__(self, specs: list[Spec] | None = None) -> None:
        self._specs: list[Spec] = list(specs or [])

    def copy(self) -> Builder[C]:
        return Builder(self._specs)

    @property
    def classes(self) -> list[type]:
        return [s.cls for s in self._specs]

    @property
    def specs(self) -> tuple[Spec, ...]:
        return tuple(self._specs)

    def _index(self, target: type) -> int:
        for i, spec in enumerate(self._specs):
            if spec.cls is target:
                return i
        raise UnknownMiddleware(
            f"{target.__name__} is not in the stack "
            f"({', '.join(c.__name__ for c in self.classes) or 'empty'})"
        )

    def use(self, cls: type, **kwargs: Any) -> Builder[C]:
        self._specs.append(Spec(cls, kwargs))
        return self

    def insert_before(self, target: type, cls: type, **kwargs: Any) -> Builder[C]:
        self._specs.insert(self._index(target), Spec(cls, kwargs))
        return self

    def insert_after(self, target: type, cls: type, **kwargs: Any) -> Builder[C]:
        self._specs.insert(self._index(target) + 1, Spec(cls, kwargs))
        return self

    def replace(self, target: type, cls: type, **kwargs: Any) -> Builder[C]:
        self._specs[self._index(target)] = Spec(cls, kwargs)
        return self

    def delete(self, target: type) -> Builder[C]:
        self._specs = [s for s in self._specs if s.cls is not target]
        return self

    def build(self, terminal: Handler[C] | None = None) -> Handler[C]:
        """Compose the stack, outermost first; the innermost calls `terminal`."""

        async def _end(ctx: C) -> None:
            return None

        app: Handler[C] = terminal or _end
        for spec in reversed(self._specs):
            app = spec.cls(app, **spec.kwargs)
        return app

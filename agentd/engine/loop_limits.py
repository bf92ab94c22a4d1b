"""A loop's own step and token limits, and raising them on resume.

Guarantee: a loop's limit is its state's `max_steps` / `max_tokens_total` when set (a
positive integer), else its agent's; a raise always leaves room for at least one more turn.
Tolerates: state written by a user at start (the same keys, the same meaning).
Never: writes; `Lifecycle.resume` merges what `raised` returns under the loop lock.
Called by: pipeline.llm (NetworkCalling, Compaction), engine.lifecycle, admin.
"""

from __future__ import annotations

from typing import Any

from agentd.engine import tokens
from agentd.errors import BadRequest
from agentd.store.models import Loop


def _positive(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def max_steps(agent: Any, loop: Loop) -> int | None:
    """The loop's step limit: loop state `max_steps`, else the agent's."""
    own = _positive(loop.state.get("max_steps")) if isinstance(loop.state, dict) else None
    return own if own is not None else _positive(getattr(agent, "max_steps", None))


def at_max_steps(agent: Any, loop: Loop) -> bool:
    limit = max_steps(agent, loop)
    return limit is not None and loop.step_count >= limit


def raised(loop: Loop, *, max_steps: int | None, max_tokens_total: int | None) -> dict[str, int]:
    """The state patch that sets the loop's own limits; BadRequest for a limit the loop has
    already used up (resuming would only pause it again)."""
    patch: dict[str, int] = {}
    if max_steps is not None:
        if max_steps <= loop.step_count:
            raise BadRequest(
                f"max_steps must exceed the loop's step_count ({loop.step_count}); got {max_steps}"
            )
        patch["max_steps"] = max_steps
    if max_tokens_total is not None:
        used = tokens.spent(loop)
        if max_tokens_total <= used:
            raise BadRequest(
                f"max_tokens_total must exceed the tokens the loop has spent ({used}); "
                f"got {max_tokens_total}"
            )
        patch["max_tokens_total"] = max_tokens_total
    return patch

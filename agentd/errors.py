"""Every error agentd raises.

```
AgentdError
  ConfigError
  PipelineError
    UnknownMiddleware
  NotFound
    UnknownAgent · LoopNotFound · ToolCallNotFound · UnknownVersion
  Conflict
    InvalidTransition · AlreadyDecided · UpgradeWouldOrphan
  PreconditionFailed · PreconditionRequired
  BadRequest
    InputInvalid (InputAnswerInvalid) · StateTooLarge · IdempotencyKeyReused
  LimitExceeded
    MaxStepsExceeded · MaxDurationExceeded · TokenBudgetExceeded · CostBudgetExceeded
  LLMError
    LLMTransportError · LLMTimeout · LLMStatusError · LLMProtocolError
  ToolError
    ToolTransportError (McpError) · ToolArgumentsInvalid · ToolTimeout · UnknownTool
  DatabaseError   a statement failed (db.pool.translate_pg_errors: the driver's is __cause__)
    DatabaseUnavailable
      SchemaChanged · DatabaseMissing
  AddressInUse
  TooManyToolCalls   a model answer over max_tool_calls_per_turn (the loop fails)
FenceLost   control flow, not failure: a stale generation lost its fence
```

A class docstring is its default message. Errors that can reach the API carry
`problem_type` (a stable slug) and `status`; `agentd.api.problems` renders them.
"""

from __future__ import annotations

from typing import ClassVar

from agentd.json_types import JSONValue


class AgentdError(Exception):
    """agentd failed."""

    problem_type: ClassVar[str] = "internal"
    status: ClassVar[int] = 500

    def __init__(self, message: str | None = None, **details: JSONValue) -> None:
        """`details` become members of the problem document the API answers with."""
        self.message = message or (self.__doc__ or self.__class__.__name__).strip()
        self.details = details
        super().__init__(self.message)


class ConfigError(AgentdError):
    """The configuration is invalid."""

    problem_type = "config-error"
    status = 500


class PipelineError(AgentdError):
    """The middleware pipeline is misconfigured."""


class UnknownMiddleware(PipelineError):
    """No middleware of that class is in the stack."""


class BadRequest(AgentdError):
    """The request is malformed."""

    problem_type = "bad-request"
    status = 400


class NotFound(AgentdError):
    """Not found."""

    problem_type = "not-found"
    status = 404


class UnknownAgent(NotFound):
    """No agent is registered under that name."""

    problem_type = "unknown-agent"
    status = 422


class LoopNotFound(NotFound):
    """No loop has that id."""

    problem_type = "loop-not-found"


class ToolCallNotFound(NotFound):
    """No tool call has that id."""

    problem_type = "tool-call-not-found"


class Conflict(AgentdError):
    """The request conflicts with the current state."""

    problem_type = "conflict"
    status = 409


class InvalidTransition(Conflict):
    """The loop cannot make that transition from its current status."""

    problem_type = "invalid-transition"


class AlreadyDecided(Conflict):
    """The tool call was already decided or has started."""

    problem_type = "already-decided"


class UpgradeWouldOrphan(Conflict):
    """The upgrade would orphan a pending tool call: its tool has another name, or none, in
    the target version."""

    problem_type = "upgrade-would-orphan"


class UnknownVersion(NotFound):
    """No such agent version is recorded (GET /v1/agents lists them)."""

    problem_type = "unknown-version"
    status = 422


class PreconditionFailed(AgentdError):
    """The resource is no longer at the version given in If-Match."""

    problem_type = "precondition-failed"
    status = 412


class PreconditionRequired(AgentdError):
    """This change needs an If-Match header naming the version it applies to."""

    problem_type = "precondition-required"
    status = 428


class InputInvalid(BadRequest):
    """The request is invalid."""

    problem_type = "validation-error"
    status = 422


class InputAnswerInvalid(InputInvalid):
    """The answer does not match what the MCP server asked for."""

    problem_type = "input-answer-invalid"


class IdempotencyKeyReused(BadRequest):
    """The Idempotency-Key was used with a different request."""

    problem_type = "idempotency-key-reused"
    status = 422


class TooManyToolCalls(AgentdError):
    """The model asked for more tool calls in one answer than the agent allows."""

    problem_type = "too-many-tool-calls"
    status = 422


class StateTooLarge(BadRequest):
    """The loop's state would be larger than AGENTD_MAX_STATE_BYTES."""

    problem_type = "state-too-large"
    status = 413


class LimitExceeded(AgentdError):
    """A loop limit was exceeded."""

    problem_type = "limit-exceeded"
    status = 409


class MaxStepsExceeded(LimitExceeded):
    """The loop reached its agent's max_steps."""


class MaxDurationExceeded(LimitExceeded):
    """The loop ran longer than its agent's max_duration."""


class TokenBudgetExceeded(LimitExceeded):
    """The loop spent its token budget (max_tokens_total)."""


class CostBudgetExceeded(LimitExceeded):
    """The loop spent its cost budget (max_cost)."""


class LLMError(AgentdError):
    """The LLM call failed."""

    problem_type = "llm-error"
    status = 502


class LLMTransportError(LLMError):
    """The LLM endpoint could not be reached or the connection broke."""

    def __init__(self, message: str | None = None, *, connected: bool = False, **d: JSONValue):
        super().__init__(message, **d)
        # A connection that never established is safe to re-send; one that broke is not.
        self.connected = connected


class LLMTimeout(LLMError):
    """The LLM endpoint went silent for longer than read_timeout."""


class LLMIdleTimeout(LLMTimeout):
    """A streamed answer completed no event for longer than idle_timeout (bytes may have
    trickled in). Re-sent like a refused connection while nothing was handed over."""


class LLMStatusError(LLMError):
    """The LLM endpoint answered with an error status."""

    def __init__(
        self,
        message: str | None = None,
        *,
        status_code: int,
        retry_after: float | None = None,
        body: str = "",
        **d: JSONValue,
    ) -> None:
        super().__init__(message or f"LLM endpoint answered HTTP {status_code}", **d)
        self.status_code = status_code
        self.retry_after = retry_after
        self.body = body


class LLMProtocolError(LLMError):
    """The LLM endpoint answered something that is not a valid response."""


class ToolError(AgentdError):
    """The tool call failed."""

    problem_type = "tool-error"
    status = 502


class ToolTransportError(ToolError):
    """The MCP server could not be reached or broke the protocol."""


McpError = ToolTransportError


class McpSessionInvalid(ToolTransportError):
    """The MCP server no longer knows the session."""


class ToolArgumentsInvalid(ToolError):
    """The tool arguments are not valid JSON or do not match the schema."""

    problem_type = "tool-arguments-invalid"
    status = 422


class ToolTimeout(ToolError):
    """The tool call did not finish within its timeout."""


class UnknownTool(ToolError):
    """The model called a tool that is not advertised to it."""


class DatabaseError(AgentdError):
    """The database failed the statement."""

    # The API renders it as any unexpected error: a 500 without the driver's wording.

    def __init__(self, message: str | None = None, *, driver: str | None = None, **d: JSONValue):
        super().__init__(message, **d)
        #: the class name of the driver's exception (which is `__cause__`)
        self.driver = driver or type(self).__name__


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached."""

    problem_type = "database-unavailable"
    status = 503


class SchemaChanged(DatabaseUnavailable):
    """A migration outdated a cached statement: nothing was written, and a retry succeeds."""


class DatabaseMissing(DatabaseUnavailable):
    """The database does not exist, or the server rejected the role or password."""


class AddressInUse(AgentdError):
    """The address the server should listen on is taken by another process."""


class FenceLost(Exception):
    """A stale generation lost its fence; nothing was written."""

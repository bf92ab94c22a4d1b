"""POST /v1/loops:batch: many loops started in one transaction, idempotent per item.

All or nothing: every item is checked and started in one transaction, so a bad item (its
problem names it: `loops[i]` and `index`) starts none of them. An item with an
`idempotency_key` shares the keys of POST /v1/loops' Idempotency-Key: the same key and item
answer with the loop the key started; the key with another item is a 409.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from agentd.api import idempotency, problems
from agentd.api.problems import ApiProblem
from agentd.api.schemas import LoopOut, StartLoop
from agentd.api.state import AppState
from agentd.db.pool import Connection, transaction
from agentd.errors import AgentdError, LoopNotFound
from agentd.store import idempotency_keys, loops
from agentd.store.models import Loop

#: The most loops one request starts: its transaction stays short, its body under the limit.
MAX_ITEMS = 500
#: Rounds before giving up on keys that concurrent requests keep taking (each round, the
#: keys they committed are answered as replays, so the second round normally ends it).
_ROUNDS = 3


class _ItemProblems(APIRoute):
    """A body that fails validation inside an item is a 422 naming the item (`loops[i]`,
    `index`), not only a path of numbers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def named(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                raise _invalid(exc) from None

        return named


router = APIRouter(tags=["loops"], route_class=_ItemProblems)


class BatchItem(StartLoop):
    idempotency_key: str | None = Field(
        None,
        pattern=idempotency.KEY_PATTERN,
        description="As POST /v1/loops' Idempotency-Key (the same keys): the same key and "
        "item again answer with the loop it started; the key with another item is a 409.",
    )


class StartLoops(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    loops: list[BatchItem] = Field(
        min_length=1, max_length=MAX_ITEMS, description="The loops to start, 1 to 500."
    )


class StartedLoops(BaseModel):
    loops: list[LoopOut] = Field(description="The loops, in the order of the items.")
    replayed: list[int] = Field(
        description="Indexes of the items whose idempotency_key had started a loop already "
        "(answered with that loop; nothing new started for them)."
    )


class _KeyTaken(Exception):
    """A concurrent request committed one of the batch's keys first."""


@router.post(
    "/loops:batch",
    status_code=201,
    summary="Start many loops",
    responses=problems.responses(400, 401, 403, 404, 409, 413, 422),
)
async def start_loops(body: StartLoops, request: Request) -> StartedLoops:
    """Start every item's loop (the fields of POST /v1/loops, plus `idempotency_key`) in one
    transaction: all of them, or none and a problem naming the item (`index`)."""
    state: AppState = request.app.state.agentd
    _distinct_keys(body.loops)
    for _ in range(_ROUNDS):
        try:
            async with transaction(state.pool) as conn:
                started, replayed = await _start_all(state, conn, body.loops)
            return StartedLoops(loops=[LoopOut.of(x) for x in started], replayed=replayed)
        except _KeyTaken:
            continue  # rolled back: read the keys again, now committed
    raise ApiProblem(409, "concurrent requests kept taking this batch's idempotency keys; retry")


async def _start_all(
    state: AppState, conn: Connection, items: list[BatchItem]
) -> tuple[list[Loop], list[int]]:
    window = state.settings.idempotency_key_retention
    digests = {i: idempotency.request_hash(_item_body(x)) for i, x in enumerate(items)}
    keyed = [x.idempotency_key for x in items if x.idempotency_key is not None]
    found = await idempotency_keys.get_many(conn, keys=keyed, window=window) if keyed else {}
    out: list[Loop] = []
    replayed: list[int] = []
    for i, item in enumerate(items):
        known = found.get(item.idempotency_key) if item.idempotency_key else None
        try:
            if known is None:
                out.append(await _start(state, conn, item))
                continue
            out.append(await _replay(conn, known, digests[i], i))
            replayed.append(i)
        except AgentdError as exc:
            raise _at_item(exc, i) from None
    new = [(i, x.idempotency_key) for i, x in enumerate(items) if x.idempotency_key]
    new = [(i, k) for i, k in new if k not in found]
    if new:
        taken = await idempotency_keys.claim_many(
            conn,
            keys=[k for _, k in new],
            request_hashes=[digests[i] for i, _ in new],
            loop_ids=[out[i].id for i, _ in new],
            window=window,
        )
        if len(taken) < len(new):
            raise _KeyTaken()  # rolls every start of this round back
    return out, replayed


async def _start(state: AppState, conn: Connection, item: BatchItem) -> Loop:
    return await state.lifecycle.start_in(
        conn,
        agent=item.agent,
        message=item.message,
        subject=item.subject,
        state=item.initial_state(),
        observe=item.observe,
        concurrency_key=item.concurrency_key,
        concurrency_limit=item.concurrency_limit,
    )


async def _replay(
    conn: Connection, known: idempotency_keys.IdempotencyKey, digest: bytes, index: int
) -> Loop:
    if known.request_hash != digest:
        raise ApiProblem(
            409,
            f"loops[{index}]: idempotency_key {known.key!r} was used with a different "
            f"request (for loop {known.loop_id}); use a new key for a new loop",
            problem_type="idempotency-key-reused",
            index=index,
            loop_id=str(known.loop_id),
        )
    loop = await loops.get(conn, loop_id=known.loop_id)
    if loop is None:
        raise LoopNotFound(f"the loop of idempotency_key {known.key!r} no longer exists")
    return loop


def _item_body(item: BatchItem) -> dict[str, Any]:
    """What the item's key is bound to: its POST /v1/loops body, so a key used there and
    here with the same fields answers with the same loop."""
    return item.model_dump(mode="json", exclude={"idempotency_key"})


def _distinct_keys(items: list[BatchItem]) -> None:
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        key = item.idempotency_key
        if key is None:
            continue
        if key in first:
            raise ApiProblem(
                422,
                f"loops[{i}]: idempotency_key {key!r} is the key of loops[{first[key]}] too; "
                "each item needs its own",
                problem_type="validation-error",
                index=i,
                errors=[{"field": f"body.loops[{i}].idempotency_key", "message": "repeated"}],
            )
        first[key] = i


def _at_item(exc: AgentdError, index: int) -> AgentdError:
    """The engine's refusal of one item (unknown agent, bad state...), naming the item."""
    exc.message = f"loops[{index}]: {exc.message}"
    exc.details = {**exc.details, "index": index}
    return exc


def _invalid(exc: RequestValidationError) -> ApiProblem:
    errors = []
    indexes: list[int] = []
    for e in exc.errors():
        loc = list(e.get("loc", ()))
        where = _where(loc)
        if len(loc) > 2 and loc[:2] == ["body", "loops"] and isinstance(loc[2], int):
            indexes.append(loc[2])
        errors.append({"field": where, "message": str(e.get("msg", "invalid"))})
    detail = "; ".join(f"{e['field'].removeprefix('body.')}: {e['message']}" for e in errors)
    extra: dict[str, Any] = {"errors": errors[:50]}
    if indexes:
        extra["index"] = min(indexes)
    return ApiProblem(
        422, detail[:2000] or "invalid request", problem_type="validation-error", **extra
    )


def _where(loc: list[Any]) -> str:
    """("body", "loops", 3, "message") -> "body.loops[3].message"."""
    if len(loc) > 2 and loc[:2] == ["body", "loops"] and isinstance(loc[2], int):
        rest = "".join(f".{p}" for p in loc[3:])
        return f"body.loops[{loc[2]}]{rest}"
    return ".".join(str(p) for p in loc)

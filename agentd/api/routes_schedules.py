"""/v1/schedules: start loops from a cron expression or at a time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentd.api import problems
from agentd.api.routes_loops import app_state
from agentd.api.schemas import Bool, CleanStr, JsonObject, NonBlank, Page
from agentd.db.pool import connection, transaction
from agentd.engine import scheduler
from agentd.errors import Conflict, NotFound
from agentd.store import schedules
from agentd.store.schedules import Schedule

router = APIRouter(prefix="/schedules", tags=["schedules"])

Name = Annotated[
    str, Path(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$", description="The schedule's name.")
]


class ScheduleNotFound(NotFound):
    """No schedule has that name."""

    problem_type = "schedule-not-found"


class CreateSchedule(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")]
    agent: CleanStr = Field(min_length=1, max_length=200)
    message: NonBlank
    cron: CleanStr | None = Field(
        None, max_length=200, description="Five-field cron, e.g. `*/15 * * * *`."
    )
    at: datetime | None = Field(None, description="One run at this instant (with offset).")
    timezone: CleanStr = Field("UTC", max_length=64, description="IANA zone for `cron`.")
    overlap: Literal["skip", "queue", "allow"] = "skip"
    subject: CleanStr | None = Field(None, max_length=1000)
    state: JsonObject = Field(default_factory=dict)
    enabled: Bool = True

    @model_validator(mode="after")
    def _valid(self) -> CreateSchedule:
        scheduler.ScheduleSpec.model_validate(self.model_dump(exclude={"name"}))
        return self


class ScheduleOut(BaseModel):
    name: str
    agent: str
    message: str
    cron: str | None
    timezone: str
    overlap: str
    enabled: bool
    source: str
    subject: str | None
    state: dict[str, Any]
    next_runs: list[datetime]
    runs: int
    skipped_runs: int
    pending_runs: int
    last_run_at: datetime | None
    last_loop_id: UUID | None
    created_at: datetime

    @classmethod
    def of(cls, s: Schedule) -> ScheduleOut:
        return cls(
            name=s.name,
            agent=s.agent,
            message=s.message,
            cron=s.cron,
            timezone=s.timezone,
            overlap=s.overlap,
            enabled=s.enabled,
            source=s.source,
            subject=s.subject,
            state=s.state if isinstance(s.state, dict) else {},
            next_runs=scheduler.upcoming(s),
            runs=s.runs,
            skipped_runs=s.skipped_runs,
            pending_runs=s.pending_runs,
            last_run_at=s.last_run_at,
            last_loop_id=s.last_loop_id,
            created_at=s.created_at,
        )


@router.post(
    "",
    status_code=201,
    summary="Create a schedule",
    responses=problems.responses(400, 401, 403, 409, 413, 422),
)
async def create_schedule(body: CreateSchedule, request: Request) -> ScheduleOut:
    """Start `agent` with `message` on every `cron` tick (or once `at`), fleet-wide once."""
    state = app_state(request)
    state.registry.get(body.agent)  # unknown agent: 422 naming it
    spec = scheduler.ScheduleSpec.model_validate(body.model_dump(exclude={"name"}))
    async with transaction(state.pool) as conn:
        if await schedules.get(conn, name=body.name) is not None:
            raise Conflict(f"a schedule named {body.name!r} exists; delete it first")
        row = await schedules.upsert(
            conn,
            name=body.name,
            agent=spec.agent,
            message=spec.message,
            subject=spec.subject,
            state=spec.state,
            cron=spec.cron,
            timezone=spec.timezone,
            next_run_at=spec.first_run(datetime.now(UTC)),
            overlap=spec.overlap,
            source="api",
            enabled=spec.enabled,
        )
    assert row is not None
    return ScheduleOut.of(row)


@router.get("", summary="List schedules", responses=problems.responses(401))
async def list_schedules(request: Request) -> Page[ScheduleOut]:
    async with connection(app_state(request).pool) as conn:
        rows = await schedules.list_(conn)
    return Page[ScheduleOut](items=[ScheduleOut.of(s) for s in rows], next_cursor=None)


@router.get(
    "/{name}",
    summary="One schedule with its next runs",
    responses=problems.responses(401, 404, 422),
)
async def get_schedule(name: Name, request: Request) -> ScheduleOut:
    async with connection(app_state(request).pool) as conn:
        row = await schedules.get(conn, name=name)
    if row is None:
        raise ScheduleNotFound(f"no schedule {name!r}")
    return ScheduleOut.of(row)


@router.delete(
    "/{name}",
    summary="Delete a schedule (its loops stay)",
    responses=problems.responses(401, 403, 404, 422),
)
async def delete_schedule(name: Name, request: Request) -> ScheduleOut:
    async with transaction(app_state(request).pool) as conn:
        row = await schedules.delete(conn, name=name)
    if row is None:
        raise ScheduleNotFound(f"no schedule {name!r}")
    return ScheduleOut.of(row)


async def _enable(request: Request, name: str, enabled: bool) -> ScheduleOut:
    async with transaction(app_state(request).pool) as conn:
        row = await schedules.get(conn, name=name)
        if row is None:
            raise ScheduleNotFound(f"no schedule {name!r}")
        nxt = None
        if enabled and row.cron:  # resuming skips the ticks missed while paused
            nxt = scheduler.next_tick(row.cron, row.timezone, datetime.now(UTC))
        row = await schedules.set_enabled(conn, name=name, enabled=enabled, next_run_at=nxt)
    assert row is not None
    return ScheduleOut.of(row)


@router.post(
    "/{name}/pause",
    summary="Stop firing a schedule",
    responses=problems.responses(401, 403, 404, 422),
)
async def pause_schedule(name: Name, request: Request) -> ScheduleOut:
    return await _enable(request, name, False)


@router.post(
    "/{name}/resume",
    summary="Fire a paused schedule again from its next tick",
    responses=problems.responses(401, 403, 404, 422),
)
async def resume_schedule(name: Name, request: Request) -> ScheduleOut:
    return await _enable(request, name, True)

"""Agents, their versions, and moving loops between versions (upgrades)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field

from agentd.api.schemas.base import Bool, CleanStr, _In


class AgentVersionOut(BaseModel):
    id: str
    created_at: datetime
    version_policy: str = Field(description="pin | latest")
    loops_active: int = Field(
        description="Queued, running and waiting loops on this version (or moving to it)."
    )
    workers: list[UUID] = Field(description="Live workers that can run this version.")
    current: bool = Field(description="The version this API process loaded.")


class AgentOut(BaseModel):
    name: str
    source: str | None = Field(
        description="Where this API process loaded it from; null: only workers have it."
    )
    dialect: str | None
    model: str | None
    streaming: bool | None
    sequential_tool_calls: bool | None
    version: str | None = Field(
        None, description="The version this API process loaded (new loops run it)."
    )
    versions: list[AgentVersionOut] = Field(
        default_factory=list, description="Every recorded version, newest first."
    )


class UpgradeLoop(_In):
    to_version: CleanStr | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Default: the agent's newest version.",
    )
    dry_run: Bool = Field(default=False, description="Only show what would change; write nothing.")


class UpgradeAgent(UpgradeLoop):
    from_version: CleanStr | None = Field(
        default=None, min_length=1, max_length=64, description="Only loops on this version."
    )


class LoopUpgradeOut(BaseModel):
    loop_id: UUID
    agent: str
    from_version: str | None
    to_version: str
    pending_upgrade: str | None = Field(
        description="The version the loop moves to at its next turn boundary (after a real "
        "upgrade: to_version)."
    )
    known_from: bool = Field(description="Whether from_version's definition is recorded.")
    dry_run: bool
    applies: str
    diff: dict[str, Any] = Field(
        description="changed keys, servers, prefixes, whitelists, tools renamed/removed/kept, "
        "approval_required added/removed, limits from/to."
    )
    orphaned_calls: list[str] = Field(
        description="Unresolved calls whose tool the target would not offer under that name "
        "(a real upgrade is refused while there are any)."
    )


class AgentUpgradeOut(BaseModel):
    agent: str
    to_version: str
    dry_run: bool
    loops: list[UUID] = Field(description="Loops upgraded (or, dry, that would be).")
    refused: list[dict[str, Any]] = Field(description="Loops refused: {loop_id, orphaned_calls}.")
    diffs: dict[str, Any] = Field(description="The diff from each version the loops were on.")
    remaining: bool = Field(description="More loops to upgrade: send the request again.")

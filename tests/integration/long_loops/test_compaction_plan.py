"""What a compaction summarises and keeps (pure logic over message rows)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from agentd.engine import transcript
from agentd.pipeline.llm import prompt
from agentd.store.models import Message

LOOP = uuid.uuid4()
NOW = datetime.now(UTC)


def row(i: int, role: str, **kw: object) -> Message:
    fields: dict[str, object] = dict(
        id=i,
        loop_id=LOOP,
        role=role,
        content=f"{role}-{i}",
        reasoning=None,
        hidden=False,
        status="completed",
        step=None,
        execution_token=None,
        tool_call_id=None,
        metadata={},
        tokens_prompt=None,
        tokens_completion=None,
        tokens_cached=None,
        ttft=None,
        duration=None,
        finish_reason=None,
        error_message=None,
        created_at=NOW,
        updated_at=NOW,
    )
    fields.update(kw)
    return Message(**fields)  # type: ignore[arg-type]


def test_the_tail_never_starts_with_a_tool_result() -> None:
    rows = [row(1, "user"), row(2, "assistant"), row(3, "tool"), row(4, "tool"), row(5, "tool")]
    plan = prompt.plan_compaction(rows, keep_tail=2)
    assert plan is not None
    assert [r.id for r in plan.old] == [1] and [r.id for r in plan.tail] == [2, 3, 4, 5]
    assert plan.through == 1


def test_nothing_to_summarise_but_the_tail_means_no_compaction() -> None:
    rows = [row(1, "assistant"), row(2, "tool"), row(3, "tool")]
    assert prompt.plan_compaction(rows, keep_tail=1) is None  # the tail reaches back to 1
    assert prompt.plan_compaction(rows[:1], keep_tail=5) is None
    plan = prompt.plan_compaction([row(0, "user"), *rows], keep_tail=0)
    assert plan is not None and plan.tail == [] and plan.through == 3


def test_a_later_compaction_folds_the_summary_and_skips_what_it_covered() -> None:
    rows = [
        row(1, "user"),
        row(2, "assistant"),
        row(3, "user"),
        row(4, "system", summary_through=1, content="S1"),
        row(5, "assistant"),
        row(6, "user"),
        row(7, "assistant"),
    ]
    summary, current = transcript.prompt_rows(rows)
    assert summary is not None and summary.id == 4
    assert [r.id for r in current] == [2, 3, 5, 6, 7]
    plan = prompt.plan_compaction(rows, keep_tail=1)
    assert plan is not None and plan.summary == summary
    assert [r.id for r in plan.old] == [2, 3, 5, 6] and [r.id for r in plan.tail] == [7]


def test_superseded_and_hidden_rows_never_reach_the_prompt() -> None:
    rows = [
        row(1, "user"),
        row(2, "assistant", superseded_at=NOW),
        row(3, "assistant", hidden=True, status="failed"),
        row(4, "assistant", content="kept"),
    ]
    rendered = prompt.history("sys", rows, [])
    assert [(m.role, m.content) for m in rendered] == [
        ("system", "sys"),
        ("user", "user-1"),
        ("assistant", "kept"),
    ]

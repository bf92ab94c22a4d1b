"""Oversized tool results are cut to `max_tool_result_bytes` with a marker that says so."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentd.pipeline.tool.tool_execution import cap_result, cap_structured


@given(text=st.text(max_size=3000), limit=st.integers(min_value=1024, max_value=4096))
def test_a_capped_result_fits_the_limit_and_says_when_it_was_cut(text: str, limit: int) -> None:
    out = cap_result(text, limit)
    size = len(text.encode("utf-8", errors="replace"))
    if size <= limit:
        assert out == text
    else:
        assert len(out.encode()) <= limit
        assert out.endswith(f"[agentd: tool result truncated: {size} bytes, limit {limit}]")
        assert text.startswith(out[: out.rindex("\n[agentd:")])


def test_a_multibyte_character_is_never_split() -> None:
    out = cap_result("✓" * 5000, 1024)
    out.encode("utf-8")  # no lone surrogate or broken sequence
    assert out.startswith("✓" * 300) and "\ufffd" not in out


def test_structured_content_too_large_to_store_is_dropped() -> None:
    assert cap_structured({"a": "x" * 2000}, 1024) is None
    assert cap_structured({"a": 1}, 1024) == {"a": 1}
    assert cap_structured(None, 1024) is None

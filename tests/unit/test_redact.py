from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from agentd import redact


def test_bearer_keys_and_query_params_are_masked() -> None:
    canary = "sk-canary1234567890"
    data = {
        "headers": {"Authorization": f"Bearer {canary}", "x-api-key": canary, "Accept": "x"},
        "url": f"https://h/v1beta/models/m:generateContent?key={canary}&alt=sse",
        "body": {"api_key": canary, "nested": [f"token is Bearer {canary}"]},
    }
    out = redact.scrub(data)
    assert canary not in repr(out)
    assert out["headers"]["Accept"] == "x"
    assert "alt=sse" in out["url"]


# The fast path (`_may_hold`) only skips texts no detector could match: on any text, its
# answer is the one the full path gives.
_PIECES = st.sampled_from(
    [
        "\\", "\\\\", "\\n", '\\"', "\\u0073", "\\u00", "u0073", "%73", "%2", "%", '"', ":",
        "data:", "data: ", "\n", "k", "-", "sk-", "s", "AIza", "Bearer ", "bEaReR\t", "basic ",
        "Basic dXNlcjpwYXNz", "?key=", "&token=", "=", "c2stY2FuYXJ5", "Y2FuYXJ5",
        "\u0130", "\u017f",
        "canary123456", "x", " ", "{", "}", "0", "/", "+",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=24), extra=st.text(max_size=8))
def test_the_fast_path_never_changes_the_answer(pieces: list[str], extra: str) -> None:
    redact.remember("canary123456")
    value = "".join(pieces) + extra
    with _full_path():
        expected = redact.text(value)
    assert redact.text(value) == expected


@contextlib.contextmanager
def _full_path() -> Iterator[None]:
    saved = redact._may_hold
    redact._may_hold = lambda value: True  # type: ignore[assignment]
    try:
        yield
    finally:
        redact._may_hold = saved  # type: ignore[assignment]

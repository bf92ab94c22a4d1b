from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
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


# A document is first tested whole, serialized (`_clean_document`): on any document, what
# scrub returns is what the walk over every string and key returns.
_KEYS = st.sampled_from(["a", "Token", "api_key", "x", "data", "k\u212a", "tok\\en", "1"])
_DOCS = st.recursive(
    st.one_of(
        # Clean strings often, so that whole documents often pass the test unwalked.
        st.sampled_from(
            ["", "x", "plain words", "k", "0 1", "Token", "d\u0131ata", "a literal-secret-1"]
        ),
        st.lists(_PIECES, max_size=3).map("".join),
        st.integers(),
        st.none(),
        st.booleans(),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(doc=st.dictionaries(_KEYS, _DOCS, max_size=5) | st.lists(_DOCS, max_size=4))
def test_the_whole_document_test_never_changes_the_answer(doc: object) -> None:
    redact.remember("canary123456")
    with _noting_set(True):  # the engine's setting: the walk below looks texts up
        with _walk_only():
            expected = redact.scrub(doc, also=["literal-secret-1"])
        assert redact.scrub(doc, also=["literal-secret-1"]) == expected
        # Walked again, each text found clean before is looked up, not scanned: the same answer.
        assert redact.scrub(doc, also=["literal-secret-1"], whole=False) == expected
        assert redact.scrub(doc, whole=False) == redact.scrub(doc)


def test_a_clean_document_is_returned_itself_and_a_dirty_one_masked() -> None:
    clean = {"role": "assistant", "content": "the sum is 5", "n": [1, 2.5, None]}
    assert redact.scrub(clean) is clean
    dirty = {"role": "user", "content": ["call it with literal-secret-1 please"]}
    out = redact.scrub(dirty, also=["literal-secret-1"])
    assert out == {"role": "user", "content": [f"call it with {redact.MASK} please"]}
    keyed = {"nested": {"Api_Key": "whatever-it-is"}}
    assert redact.scrub(keyed) == {"nested": {"Api_Key": redact.MASK}}


def test_a_secret_json_escapes_turns_the_whole_document_test_off() -> None:
    # A quote inside a known secret is escaped when serialized: the document must be walked.
    secret = 'quote"d-secret-value'
    redact.remember(secret)
    try:
        assert redact.scrub({"x": f"echo {secret}"}) == {"x": f"echo {redact.MASK}"}
        assert redact.scrub(["a", {"y": secret}], also=['also"quoted']) == ["a", {"y": redact.MASK}]
    finally:
        redact.forget_all()


@contextlib.contextmanager
def _walk_only() -> Iterator[None]:
    saved = redact._clean_document
    redact._clean_document = lambda value, also: False  # type: ignore[assignment]
    try:
        yield
    finally:
        redact._clean_document = saved  # type: ignore[assignment]


@contextlib.contextmanager
def _noting_set(on: bool) -> Iterator[None]:
    # The setting is process-wide and an Engine built by an earlier test in this worker turns
    # it on for good: set what a test needs and put back what was there.
    before = redact._noting
    redact.note_clean_texts(on)
    try:
        yield
    finally:
        redact.note_clean_texts(before)


@pytest.fixture
def noting() -> Iterator[None]:
    with _noting_set(True):
        yield


def test_texts_are_not_noted_unless_a_process_turns_it_on() -> None:
    value = "".join(["x" * redact._RECENT_MIN, "!"])
    with _noting_set(False):
        assert redact.text(value) is value and id(value) not in redact._recent


def test_a_text_found_clean_is_looked_up_until_the_known_secrets_change(noting: None) -> None:
    redact.forget_all()
    value = "".join(["an echo of ", "later-secret-123", " " * redact._RECENT_MIN])  # fresh
    assert redact.text(value) is value
    assert redact._recent.get(id(value)) is value
    # A new secret empties the record: the same object is scanned again and masked.
    redact.remember("later-secret-123")
    try:
        masked = f"an echo of {redact.MASK}" + " " * redact._RECENT_MIN
        assert redact.text(value) == masked
        # The store's walk (whole=False) masks it too, and a masked result is not recorded.
        assert redact.scrub({"raw": value}, whole=False) == {"raw": masked}
        assert all(v != masked for v in redact._recent.values())
    finally:
        redact.forget_all()


def test_the_record_of_clean_texts_is_bounded(noting: None) -> None:
    redact.forget_all()
    pad = "p" * redact._RECENT_MIN
    texts = ["".join([pad, str(i)]) for i in range(redact._RECENT_COUNT + 50)]
    for t in texts:
        redact.text(t)
    assert len(redact._recent) == redact._RECENT_COUNT
    big = "x" * (redact._RECENT_CHARS // 16 + 1)
    assert redact.text(big) is big and id(big) not in redact._recent
    short = "".join(["s", "hort"])  # scanning it again costs no more than noting it
    assert redact.text(short) is short and id(short) not in redact._recent


def test_headers_mask_secret_headers_whole_and_literal_secrets_in_the_rest() -> None:
    masked = redact.headers(
        {"Authorization": "Bearer anything", "X-Echo": "key=plain-literal-42;ok"},
        also=["plain-literal-42"],
    )
    assert masked == {"Authorization": redact.MASK, "X-Echo": f"key={redact.MASK};ok"}
    assert redact.headers({"X-Echo": "key=plain-literal-42"})["X-Echo"] == "key=plain-literal-42"

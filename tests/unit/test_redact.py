from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from agentd import redact
from agentd.redact import detect


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
        "Basic dXNlcjpwYXNz", "?key=", "&token=", "=", "?API_KEY=", "&Access_Token=",
        "c2stY2FuYXJ5", "Y2FuYXJ5",
        "\u0130", "\u017f",
        "canary123456", "x", " ", "{", "}", "0", "/", "+",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=24), extra=st.text(max_size=8))
def test_the_fast_path_never_changes_the_answer(pieces: list[str], extra: str) -> None:
    redact.current().remember("canary123456")
    value = "".join(pieces) + extra
    with _full_path():
        expected = redact.text(value)
    assert redact.text(value) == expected


@contextlib.contextmanager
def _full_path() -> Iterator[None]:
    saved = detect.may_hold
    detect.may_hold = lambda value, k: True  # type: ignore[assignment]
    try:
        yield
    finally:
        detect.may_hold = saved  # type: ignore[assignment]


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
    redact.current().remember("canary123456")
    with _walk_only():
        expected = redact.scrub(doc, also=["literal-secret-1"])
    assert redact.scrub(doc, also=["literal-secret-1"]) == expected
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


def test_a_document_of_json_texts_is_returned_itself_and_one_secret_in_it_masked() -> None:
    # An MCP result whose text is itself JSON: serialized, its quotes become \\\" — the
    # texts, tested together as they are, hold no escape a view could decode.
    raw = '{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"{\\"sum\\": 4}"}]}}'
    doc = {"raw": raw, "headers": {"content-type": "application/json"}, "n": [1, None]}
    assert redact.scrub(doc) is doc
    leaky = {"raw": raw, "headers": {"x-echo": "Bearer abcdefghijklmnop"}}
    assert redact.scrub(leaky)["headers"]["x-echo"] == f"Bearer {redact.MASK}"
    keyed = {"raw": raw, "api_key": "anything-at-all"}
    assert redact.scrub(keyed) == {"raw": raw, "api_key": redact.MASK}
    # A text ending in a backslash and the next one starting a letter: no escape in either.
    assert redact.scrub(["C:\\dir\\", "n"]) == ["C:\\dir\\", "n"]


def test_a_secret_json_escapes_turns_the_whole_document_test_off() -> None:
    # A quote inside a known secret is escaped when serialized: the document must be walked.
    secret = 'quote"d-secret-value'
    redact.current().remember(secret)
    assert redact.scrub({"x": f"echo {secret}"}) == {"x": f"echo {redact.MASK}"}
    assert redact.scrub(["a", {"y": secret}], also=['also"quoted']) == ["a", {"y": redact.MASK}]


@contextlib.contextmanager
def _walk_only() -> Iterator[None]:
    saved = detect.clean_document
    detect.clean_document = lambda value, also, k: False  # type: ignore[assignment]
    try:
        yield
    finally:
        detect.clean_document = saved  # type: ignore[assignment]


def test_a_text_found_clean_is_masked_once_its_secret_becomes_known() -> None:
    value = "".join(["an echo of ", "later-secret-123", " " * 64])  # a fresh object
    assert redact.text(value) is value
    redact.current().remember("later-secret-123")
    masked = f"an echo of {redact.MASK}" + " " * 64
    assert redact.text(value) == masked
    assert redact.scrub({"raw": value}, whole=False) == {"raw": masked}
    assert redact.scrub({"raw": value}) == {"raw": masked}


def test_headers_mask_secret_headers_whole_and_literal_secrets_in_the_rest() -> None:
    masked = redact.headers(
        {"Authorization": "Bearer anything", "X-Echo": "key=plain-literal-42;ok"},
        also=["plain-literal-42"],
    )
    assert masked == {"Authorization": redact.MASK, "X-Echo": f"key={redact.MASK};ok"}
    assert redact.headers({"X-Echo": "key=plain-literal-42"})["X-Echo"] == "key=plain-literal-42"

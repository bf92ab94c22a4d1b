"""Storable text: whatever arrives, what we send PostgreSQL is valid UTF-8 without NUL, JSON
without NaN/Infinity or escapes jsonb refuses; clean text passes unchanged."""

from __future__ import annotations

import decimal
import json
import math
import uuid

import asyncpg
import orjson
import pytest
from asyncpg.pgproto import pgproto
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.db import pool, storable

# Every code point, surrogates and NUL included (hypothesis leaves surrogates out by default).
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from(
    ["\x00", "\ud800", "\udfff", "\ud83d\ude00", "a\\u0000b", "\\\x00", "NaN", "\ud83dx"]
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=12,
)


def _storable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in s


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT)
def test_any_text_becomes_storable_and_clean_text_is_untouched(value: str) -> None:
    out = storable.text(value)
    assert _storable(out)
    if _storable(value):
        assert out is value
    assert len(out) <= len(value)  # one U+FFFD per bad character, pairs joined


def test_nul_and_lone_surrogates_become_u_fffd_and_pairs_join() -> None:
    assert storable.text("a\x00b") == "a\ufffdb"
    assert storable.text("a\ud800b\udfff") == "a\ufffdb\ufffd"
    assert storable.text("\ud83d\ude00") == "\U0001f600"


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_any_json_value_dumps_to_text_jsonb_accepts(value: object) -> None:
    # json.loads turns a \u0000 or lone surrogate escape back into the character, and a
    # bare NaN token into a float: jsonb refuses all three.
    assert _jsonb_storable(json.loads(storable.dumps(value)))


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES | st.dictionaries(st.integers(), st.integers(), max_size=3))
def test_the_fast_encoder_means_what_the_careful_one_means(value: object) -> None:
    # orjson first, json when orjson refuses (surrogates, big integers, int keys): the two
    # paths write the same document, whichever one takes a value.
    assert json.loads(storable.dumps(value)) == json.loads(storable._dumps_stdlib(value))


def test_values_json_refuses_are_refused_alike() -> None:
    for value in ({"d": decimal.Decimal("1.5")}, {1, 2}, object()):
        with pytest.raises(TypeError):
            storable.dumps(value)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.sampled_from([{}, {"indent": 1}, {"ensure_ascii": False}]))
def test_the_fast_decoder_reads_what_json_reads(value: object, style: dict[str, object]) -> None:
    # msgspec first, json when msgspec refuses: whatever the text, the same value and the same
    # types (1 stays an int, 1.0 a float; NaN compared through its serialization).
    text = json.dumps(value, **style)  # type: ignore[arg-type]
    try:
        want = json.loads(text)
    except RecursionError:
        return
    got = storable.loads(text)
    assert json.dumps(got) == json.dumps(want)


def test_the_decoder_keeps_what_json_keeps_where_msgspec_alone_would_not() -> None:
    big = 2**64 + 1
    assert storable.loads(f'{{"n": {big}, "m": {-big}}}') == {"n": big, "m": -big}
    assert type(storable.loads("1" + "0" * 400)) is int  # jsonb writes 1e400 this way
    assert storable.loads("1e400") == math.inf  # a json column keeps the text as sent
    assert storable.loads('"\\ud800"') == "\ud800"  # a lone surrogate escape (json column)
    assert storable.loads('{"a": 1, "a": 2}') == {"a": 2}
    with pytest.raises(ValueError):
        storable.loads("{not json")


def test_a_uuid_is_written_as_its_string_on_both_paths() -> None:
    u = uuid.UUID("12345678-9abc-4def-8123-456789abcdef")
    sub = pgproto.UUID(str(u))  # what asyncpg reads a uuid column as: a subclass
    # orjson takes the first; a lone surrogate sends the second to json.
    for doc in ({"id": u, "ids": [sub]}, {"id": u, "ids": [sub], "s": "\ud800"}):
        out = json.loads(storable.dumps(doc))
        assert out["id"] == str(u) and out["ids"] == [str(u)]
    # The fast path takes both kinds itself (no fallback to json for a uuid).
    assert storable.dumps({"id": sub}) == orjson.dumps({"id": str(u)}).decode()


def _jsonb_storable(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return _storable(value)
    if isinstance(value, list):
        return all(_jsonb_storable(v) for v in value)
    if isinstance(value, dict):
        return all(_storable(k) and _jsonb_storable(v) for k, v in value.items())
    return True


def test_non_finite_numbers_become_null_and_strings_keep_their_words() -> None:
    value = {"a": float("nan"), "b": [float("inf"), -float("inf")], "c": "NaN Infinity"}
    assert json.loads(storable.dumps(value)) == {"a": None, "b": [None, None], "c": "NaN Infinity"}


def test_a_literal_backslash_u0000_in_a_string_is_kept() -> None:
    assert json.loads(storable.dumps({"k": "\\u0000", "n": "\x00"})) == {
        "k": "\\u0000",
        "n": "\ufffd",
    }


def test_args_clean_strings_and_text_lists_and_keep_everything_else() -> None:
    uuid_list = [object()]
    args = ("ok", "a\x00", ["x\x00", None, "y"], uuid_list, 3, {"k": "\x00"})
    out = storable.args(args)
    assert out[0] is args[0] and out[3] is uuid_list and out[5] is args[5]
    assert out[1] == "a\ufffd" and out[2] == ["x\ufffd", None, "y"]
    clean = ("a", ["b"], 1)
    assert storable.args(clean) is clean


def test_a_refused_write_reads_as_a_clear_message_without_the_drivers_words() -> None:
    err = asyncpg.exceptions.CharacterNotInRepertoireError(
        'invalid byte sequence for encoding "UTF8": 0x00'
    )
    try:
        raise RuntimeError("wrapped") from err
    except RuntimeError as exc:
        message = pool.refused_write(exc)
    assert message is not None and "22021" in message
    assert "0x00" not in message and "Repertoire" not in message
    assert pool.refused_write(ValueError("x")) is None

"""DeltaCursor: whatever mix of saved partials and deltas reaches a connection, what it
sends spells the streamed text once, in order, each piece starting where the last ended."""

from __future__ import annotations

import itertools
import random

import pytest

from agentd.api.stream_hub import Delta, DeltaCursor

TEXT = "Let me look at the numbers: 1 + 2 = 3 — ünïcødé 🙂 and done. " * 4


def pieces(rng: random.Random, text: str) -> list[tuple[int, str]]:
    """`text` cut at random points: (offset, piece), as the engine publishes it."""
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 12)))
    bounds = [0, *cuts, len(text)]
    return [(a, text[a:b]) for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("seed", range(200))
def test_partials_and_deltas_in_any_overlap_spell_the_text_once(seed: int) -> None:
    rng = random.Random(seed)
    deltas = pieces(rng, TEXT)
    # A subscriber may first read a partial (any saved prefix), and may see a delta that
    # the partial already holds, or see one twice (the flusher's mid-turn first delta).
    joined_at = rng.randrange(len(deltas))
    partial = TEXT[: deltas[joined_at][0] + rng.choice([0, len(deltas[joined_at][1])])]
    feed: list[dict[str, object]] = [{"message_id": 7, "offset": 0, "delta": partial}]
    for offset, piece in deltas[max(0, joined_at - rng.randint(0, 2)) :]:
        feed.append({"message_id": 7, "offset": offset, "delta": piece})
        if rng.random() < 0.2:
            feed.append({"message_id": 7, "offset": offset, "delta": piece})
    cursor = DeltaCursor()
    sent: list[Delta] = [d for item in feed if (d := cursor.take(item)) is not None]
    position = 0
    for d in sent:
        assert d.offset == position and not d.gap and d.text
        position += len(d.text)
    assert "".join(d.text for d in sent) == TEXT
    assert cursor.shown(7) == len(TEXT)


def test_a_hole_is_reported_and_the_text_after_it_still_placed() -> None:
    cursor = DeltaCursor()
    assert cursor.take({"message_id": 1, "offset": 0, "delta": "abc"}) == Delta(1, 0, "abc")
    # The delta for 3..10 was cut to fit NOTIFY; the next one starts after the hole.
    assert cursor.take({"message_id": 1, "offset": 10, "delta": "xyz"}) == Delta(
        1, 10, "xyz", gap=True
    )
    assert cursor.take({"message_id": 1, "offset": 11, "delta": "yz!"}) == Delta(1, 13, "!")


def test_messages_are_tracked_apart_and_bad_items_are_ignored() -> None:
    cursor = DeltaCursor()
    assert cursor.take({"message_id": 1, "offset": 0, "delta": "one"}) is not None
    assert cursor.take({"message_id": 2, "offset": 0, "delta": "two"}) == Delta(2, 0, "two")
    for bad in ({"message_id": "1", "delta": "x"}, {"message_id": 1}, {"delta": "x"}):
        assert cursor.take(bad) is None
    assert cursor.shown(1) == 3


def test_deltas_without_offsets_from_an_older_engine_are_appended_in_order() -> None:
    cursor = DeltaCursor()
    got = [cursor.take({"message_id": 1, "delta": part}) for part in ("ab", "cd", "ef")]
    assert [(d.offset, d.text) for d in got if d] == [(0, "ab"), (2, "cd"), (4, "ef")]
    for bogus in (-1, True, "3"):
        d = cursor.take({"message_id": 1, "offset": bogus, "delta": "g"})
        assert d is not None and d.offset == 6
        cursor.forget(1)
        cursor.take({"message_id": 1, "offset": 0, "delta": "abcdef"})

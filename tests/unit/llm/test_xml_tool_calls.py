from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentd.llm import xml_tool_calls


def test_calls_are_extracted_in_order_and_removed_from_content() -> None:
    text = (
        'Let me check.\n<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>'
    )
    content, calls = xml_tool_calls.parse(text)
    assert content == "Let me check."
    assert [(c.name, c.arguments) for c in calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    assert calls[0].id != calls[1].id


def test_invalid_arguments_become_none_with_raw_text() -> None:
    _, calls = xml_tool_calls.parse('<tool_call>{"name": "a", "arguments": "{oops"}</tool_call>')
    assert calls[0].arguments is None and calls[0].raw_arguments == "{oops"


def test_unrecognised_block_stays_in_content() -> None:
    text = "see <tool_call>not json</tool_call> here"
    assert xml_tool_calls.parse(text) == (text, [])


def test_unclosed_final_block_is_parsed() -> None:
    content, calls = xml_tool_calls.parse('hi <tool_call>{"name": "a", "arguments": {}}')
    assert content == "hi" and calls[0].name == "a" and calls[0].arguments == {}


def test_text_without_calls_is_untouched() -> None:
    assert xml_tool_calls.parse("  plain  ") == ("  plain  ", [])


fragments = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        '{"name": "t", "arguments": {"a": 1}}',
        '{"name": 1}',
        "{",
        "}",
        '"',
        "text",
        "\n",
        '"arguments": "{x"',
        "<",
        ">",
    ]
)


@given(st.lists(st.one_of(fragments, st.text(max_size=20)), max_size=20))
def test_random_text_gives_a_clean_result(parts: list[str]) -> None:
    content, calls = xml_tool_calls.parse("".join(parts))
    assert isinstance(content, str)
    for call in calls:
        assert isinstance(call.name, str)
        assert call.arguments is None or isinstance(call.arguments, dict)

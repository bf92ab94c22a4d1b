from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentd.mcp import eras, jsonrpc, sse


def test_sse_parser_joins_multiline_data_and_skips_comments() -> None:
    events = sse.parse(': keepalive\nevent: message\nid: 3\ndata: {"a":\ndata: 1}\n\ndata: tail')
    assert [(e.event, e.id, e.data) for e in events] == [
        ("message", "3", '{"a":\n1}'),
        ("message", "3", "tail"),
    ]  # ids persist


@given(
    st.lists(st.text(alphabet=st.characters(blacklist_characters="\r\n"), max_size=20), max_size=5)
)
def test_sse_parser_round_trips_any_data_lines(lines: list[str]) -> None:
    text = "".join(f"data: {line}\n" for line in lines) + "\n"
    events = sse.parse(text)
    assert [e.data for e in events] == (["\n".join(lines)] if lines else [])


def test_requests_get_fresh_ids_and_notifications_have_none() -> None:
    a, b = jsonrpc.request("ping"), jsonrpc.request("ping")
    assert a["id"] != b["id"]
    assert jsonrpc.is_notification(jsonrpc.notification("notifications/initialized"))
    assert jsonrpc.is_response(jsonrpc.error(1, jsonrpc.METHOD_NOT_FOUND, "nope"))


def test_modern_stamp_adds_meta_envelope_and_routing_headers() -> None:
    payload = jsonrpc.request("tools/call", {"name": "héllo", "arguments": {}})
    stamped, headers = eras.stamp(payload)
    assert "_meta" not in payload["params"]  # the caller's payload is untouched
    assert stamped["params"]["_meta"][eras.META_PROTOCOL_VERSION] == eras.MODERN_VERSION
    assert headers["Mcp-Method"] == "tools/call"
    assert headers["Mcp-Name"].startswith("=?base64?")


def test_discover_result_is_presented_as_an_initialize_result() -> None:
    discovery = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                 "_meta": {eras.META_SERVER_INFO: {"name": "s", "version": "1"}}}  # fmt: skip
    assert eras.is_modern_discovery({"result": discovery})
    result = eras.initialize_result_from_discovery(discovery)
    assert result["protocolVersion"] == "2026-07-28" and result["serverInfo"]["name"] == "s"

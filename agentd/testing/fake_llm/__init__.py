"""FakeLLM: a scripted local LLM server speaking open_ai, anthropic and gemini on their real paths.

A plain asyncio + h11 server (not uvicorn) so a test controls the socket itself: it can
stall forever, drop the connection mid-body, and count clients that hung up mid-response.
Rules are tried in order against the LAST message of the request; `times=N` expires one.

    fake = FakeLLM()
    async with fake:
        fake.add(Rule(match="weather", reply=Reply(tool_calls=[ToolCall("get_weather", {})])))
        ...  # point a Provider at fake.base_url

Also a process: `agentd fake-llm --port 0 [--rules rules.json]` (or `python -m
agentd.testing.fake_llm`) prints `LISTENING <port>`. Without --rules it runs
`default_rules()`: echo a user message, or call the tool a `/call NAME {json}` message
names, then report the tool's result. Rules are a JSON list of `{"match": null | {"contains": ...} |
{"role": ...} | {"tool_name": ...}, "reply": {...Reply fields}, "times": N}`.
"""

from __future__ import annotations

from agentd.testing.fake_llm.command import default_rules, rule_from_json, serve_command
from agentd.testing.fake_llm.script import (
    LastMessage,
    Matcher,
    RecordedRequest,
    Reply,
    Rule,
    ToolCall,
    last_message,
)
from agentd.testing.fake_llm.server import FakeLLM

__all__ = [
    "FakeLLM",
    "LastMessage",
    "Matcher",
    "RecordedRequest",
    "Reply",
    "Rule",
    "ToolCall",
    "default_rules",
    "last_message",
    "rule_from_json",
    "serve_command",
]

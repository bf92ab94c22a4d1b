"""Parse `<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks out of model text.

Used by the opt-in XML tool-call middleware for models that write tool calls into their
content (Hermes/Qwen style). A pure function: it never raises. A block whose body is not a
JSON object with a string `name` is left in the content untouched; arguments that are not a
JSON object become `arguments=None` with the text in `raw_arguments`, as for native calls.
An unclosed final block (the model stopped mid-call) is parsed up to the end of the text.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from agentd.llm.types import ToolCallRequest

_OPEN = "<tool_call>"
_CLOSE = "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def _call_from(body: str) -> ToolCallRequest | None:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    args: Any = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        raw = args
        try:
            parsed = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            parsed = None
        arguments = parsed if isinstance(parsed, dict) else None
    else:
        raw = json.dumps(args, ensure_ascii=False)
        arguments = args if isinstance(args, dict) else None
    call_id = value.get("id")
    return ToolCallRequest(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{uuid.uuid4().hex[:24]}",
        name=value["name"],
        arguments=arguments,
        raw_arguments=raw,
    )


def parse(content: str) -> tuple[str, list[ToolCallRequest]]:
    """Return the content without the recognised call blocks, and the calls in order."""
    if _OPEN not in content:
        return content, []
    calls: list[ToolCallRequest] = []
    kept: list[str] = []
    position = 0
    for match in _BLOCK.finditer(content):
        call = _call_from(match.group(1).strip())
        if call is None:
            continue  # not a call we understand: leave it in the text
        kept.append(content[position : match.start()])
        position = match.end()
        calls.append(call)
    kept.append(content[position:])
    text = "".join(kept)
    return (text.strip() if calls else content), calls

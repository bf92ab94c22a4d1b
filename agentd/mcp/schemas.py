"""What an MCP server sends that agentd must not choke on: JSON nested deeper than Python's
recursion allows, and tool input schemas it cannot use.

`parse` reads a message as `json.loads` does; a message nested too deep for it (json's C
parser raises RecursionError near a thousand levels) is read again by a loop that keeps
the first `PARSE_DEPTH` levels and puts `TOO_DEEP` where a deeper value was, so the
message's other parts (the other tools of a `tools/list` page) are still used.

`unusable` says why a tool's `inputSchema` cannot be offered to a model, or None: it must
be a JSON object schema (`"type": "object"`, as MCP requires), at most `MAX_DEPTH` levels
deep and `MAX_BYTES` long, and a valid JSON Schema (2020-12, checked by `jsonschema`).
Such a tool is dropped at discovery, with a warning naming it and the reason; a required
one fails the discovery with that reason. Nothing here recurses on the schema before its
depth is known to be small.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

#: Levels of nesting kept by `parse` when json's own parser gives up.
PARSE_DEPTH = 200
#: Put where `parse` dropped a value nested deeper than PARSE_DEPTH.
TOO_DEEP: dict[str, Any] = {"x-agentd-too-deep": True}
#: The deepest and longest input schema a tool may have.
MAX_DEPTH = 64
MAX_BYTES = 256 * 1024

_WS = re.compile(r"[ \t\n\r]*")


def parse(text: str | bytes, **kwargs: Any) -> Any:
    """`json.loads(text, **kwargs)`, or, for JSON nested too deep for it, the bounded read.
    Invalid JSON raises ValueError either way."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        if isinstance(text, bytes | bytearray):
            text = text.decode("utf-8")
        return _parse_bounded(text, json.JSONDecoder(**kwargs))


def _parse_bounded(text: str, decoder: json.JSONDecoder) -> Any:
    """An iterative JSON reader: containers by hand (no recursion), scalars by `decoder`."""
    scalar = decoder.scan_once  # type: ignore[attr-defined]
    stack: list[tuple[Any, str | None]] = []  # (container, pending key of an object)
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    result: Any = None
    done = False
    comma = False  # a comma was just read: a value (or key) must follow, not a bracket

    def put(value: Any) -> None:
        nonlocal result, done
        if not stack:
            result, done = value, True
            return
        container, key = stack[-1]
        if isinstance(container, list):
            container.append(value)
        else:
            container[key] = value
            stack[-1] = (container, None)

    while not done:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= len(text):
            raise ValueError("unexpected end of JSON")
        ch = text[pos]
        if comma and ch in "]}":
            raise ValueError(f"a trailing comma before {pos}")
        comma = False
        top = stack[-1] if stack else None
        if top is not None and isinstance(top[0], dict) and top[1] is None:
            # In an object, expecting a key (or its end).
            if ch == "}":
                pos += 1
                stack.pop()
                put(top[0])
                pos, comma = _after_value(text, pos, stack)
                continue
            if ch != '"':
                raise ValueError(f"expected a key at {pos}")
            key, pos = scalar(text, pos)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos : pos + 1] != ":":
                raise ValueError(f"expected ':' at {pos}")
            pos += 1
            stack[-1] = (top[0], key)
            continue
        if ch in "[{":
            if len(stack) >= PARSE_DEPTH:
                pos = _skip(text, pos)
                put(dict(TOO_DEEP))
                pos, comma = _after_value(text, pos, stack)
                continue
            pos += 1
            if ch == "[":
                pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
                if text[pos : pos + 1] == "]":
                    put([])
                    pos, comma = _after_value(text, pos + 1, stack)
                    continue
                stack.append(([], None))
            else:
                stack.append(({}, None))
            continue
        if ch == "]" and top is not None and isinstance(top[0], list):
            pos += 1
            stack.pop()
            put(top[0])
            pos, comma = _after_value(text, pos, stack)
            continue
        try:
            value, pos = scalar(text, pos)
        except StopIteration:
            raise ValueError(f"expected a value at {pos}") from None
        put(value)
        pos, comma = _after_value(text, pos, stack)
    if _WS.match(text, pos).end() != len(text):  # type: ignore[union-attr]
        raise ValueError("extra data after JSON")
    return result


def _after_value(text: str, pos: int, stack: list[tuple[Any, str | None]]) -> tuple[int, bool]:
    """Past the comma that follows a value inside a container (not its closing bracket),
    and whether there was one."""
    pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if stack and text[pos : pos + 1] == ",":
        return pos + 1, True
    if stack and text[pos : pos + 1] not in ("]", "}"):
        raise ValueError(f"expected ',' or a closing bracket at {pos}")
    return pos, False


def _skip(text: str, pos: int) -> int:
    """Past the container starting at `pos` (strings respected), without building it."""
    depth = 0
    i = pos
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unexpected end of JSON")


def depth(value: Any, limit: int) -> int:
    """How deep `value` nests (a scalar is 0), counted without recursion; stops early and
    returns limit + 1 once that is exceeded."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        level += 1
        if level > limit:
            return limit + 1
        deepest = max(deepest, level)
        todo.extend((child, level) for child in children)
    return deepest


def unusable(schema: Any) -> str | None:
    """Why a tool with this `inputSchema` cannot be offered to a model, or None."""
    if schema is None:
        return None  # absent: an object with no declared properties
    if not isinstance(schema, dict):
        return f"its inputSchema is not a JSON object (it is {type(schema).__name__})"
    if depth(schema, MAX_DEPTH) > MAX_DEPTH:
        return f"its inputSchema nests deeper than {MAX_DEPTH} levels"
    size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_BYTES:
        return f"its inputSchema is {size} bytes, over {MAX_BYTES}"
    if schema.get("type", "object") != "object":
        return f'its inputSchema is not an object schema ("type" is {schema.get("type")!r})'
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"its inputSchema is not a valid JSON Schema: {where}: {exc.message}"
    except RecursionError:  # a pathological $ref chain: the depth check bounds the rest
        return "its inputSchema cannot be checked (its references recurse without end)"
    return None

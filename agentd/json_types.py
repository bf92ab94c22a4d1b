"""Names for JSON whose shape agentd does not fix: loop state, tool arguments and results,
wire bodies, a client's or a model's document.

They are `Any` on purpose. A precise recursive type (`dict[str, JSON] | list[JSON] | str |
...`) would make every reader narrow with isinstance at each step, while the readers already
check the shape they need where the data comes in (api/hygiene.py, the pydantic schemas, the
dialects, mcp/jsonrpc.py). The name says "JSON here" where a bare `Any` said nothing.
"""

from __future__ import annotations

from typing import Any, TypeAlias

#: Any JSON value: an object, array, string, number, boolean or null.
JSONValue: TypeAlias = Any
#: A JSON object, its values any JSON.
JSONObject: TypeAlias = dict[str, Any]

"""Which tool names agentd accepts, and the form approvals compare them in.

The MCP specification (2025-11-25, server/tools "Tool names") says a tool name SHOULD be 1
to 128 characters of ASCII letters, digits, `_`, `-` and `.`. agentd holds every tool to
that — a server's (`tools/list`), a prefixed one as advertised, and one of its own
`Toolset`s — and refuses a name that is path-like besides (`..`, a leading `.`). So no
tool can look like another (a Cyrillic `a`, U+0430, for the Latin one), hide text (bidi overrides,
zero-width or control characters) or flood a prompt and the UI (5,000 characters). A
server's tool with such a name is dropped at discovery with a warning naming the server
and the reason (a required one fails the discovery); a Toolset refuses it at definition.
"""

from __future__ import annotations

import re
import unicodedata

MAX_LENGTH = 128
_ALLOWED = re.compile(r"[A-Za-z0-9_.-]+")


def refusal(name: object) -> str | None:
    """Why `name` is not an acceptable tool name, or None when it is."""
    if not isinstance(name, str) or not name:
        return "a tool name must be a non-empty string"
    if len(name) > MAX_LENGTH:
        return f"the name is {len(name)} characters long (at most {MAX_LENGTH})"
    if _ALLOWED.fullmatch(name) is None:
        bad = sorted({c for c in name if _ALLOWED.fullmatch(c) is None})
        shown = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in bad[:5])
        return f"only ASCII letters, digits, '_', '-' and '.' are allowed (found {shown})"
    if name.startswith(".") or ".." in name:
        return "the name looks like a path ('..' or a leading '.')"
    return None


def shown(name: object) -> str:
    """A refused name as a log line or error may show it: escaped, and cut at 80."""
    text = ascii(name)
    return text if len(text) <= 80 else f"{text[:77]}..."


def normalized(name: str) -> str:
    """The form approval gates compare in: NFKC-folded and case-folded, so a gate on
    `delete_record` also holds `DELETE_RECORD` (and, for a name that somehow is not
    ASCII, its compatibility form). Gating more calls is the safe side."""
    return unicodedata.normalize("NFKC", name).casefold()

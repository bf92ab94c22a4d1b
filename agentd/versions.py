"""Agent versions: the fingerprint of an agent's effective definition, and what changes
between two of them.

An agent version is the sha256 of its definition: the prompt, dialect, model and base URL
(never a secret: a token's *variable name* only), its MCP servers with their prefixes,
whitelists and session modes, approval rules, limits, its own middleware edits (the
`configure_*_middlewares` hooks, by name and code digest: the default stack is agentd's), its
version policy and, for an agent from a plugin package, that package's version. Each loop
records the version it runs (migrations/0025); a worker claims only loops of the versions
it has (docs/upgrading.md, "Changing an agent under running loops").
A value an agent computes per loop (a property or an overridden hook) is recorded by the
name of the code computing it, so a change of that code's name is a change of version and
a change of what it computes is not.
Called by: the registry (each process's versions), engine/versions.py (recorded at start),
the upgrade routes (the diff).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Literal

#: A loop on a `pin` agent finishes on the version it started on unless upgraded on
#: request; on a `latest` agent it moves to the agent's newest version at each turn
#: boundary.
VersionPolicy = Literal["pin", "latest"]
POLICIES: tuple[str, ...] = ("pin", "latest")

_PLAIN = (
    "dialect",
    "base_url",
    "model",
    "model_name",
    "api_key_env",
    "streaming",
    "read_timeout",
    "sequential_tool_calls",
    "llm_params",
    "reasoning_effort",
    "max_tokens",
    "reasoning_strategies",
    "refresh_mcp_tools",
    "prices",
)
#: The limits a diff reports one by one.
LIMITS = (
    "max_steps",
    "max_duration",
    "max_tokens_total",
    "max_cost",
    "context_window",
    "compaction_threshold",
    "compaction_keep_tail",
    "provider_max_concurrency",
    "provider_rpm",
    "provider_tpm",
    "concurrency_key",
    "concurrency_limit",
    "approval_timeout",
)
_MCP_KEYS = (
    "name",
    "url",
    "command",
    "cwd",
    "tools",
    "required_tools",
    "prefix",
    "session",
    "session_recovery",
    "session_ttl",
    "timeout",
    "api_token_env",
)
PREFIX_SEPARATOR = "__"  # agentd.mcp.client's (not imported: pydantic-heavy)


def _json(value: Any) -> Any:
    """A JSON-safe copy (Decimal as text, tuples as lists, other objects by type name)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else str(value)
        )
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _code_name(obj: Any) -> str:
    fn = getattr(obj, "fget", obj)
    return f"<computed: {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}>"


def _attr(cls: type, name: str) -> Any:
    """A class attribute's value, or the name of the code computing it per loop."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            raw = klass.__dict__[name]
            if isinstance(raw, property) or (callable(raw) and not isinstance(raw, type)):
                return _code_name(raw)
            return _json(raw)
    return None


def _mcp_entry(entry: Any) -> dict[str, Any]:
    """One MCP server as its definition records it: no token, header or env values."""
    if hasattr(entry, "model_dump"):  # McpServerConfig or the registry's McpEntryConfig
        data = {k: getattr(entry, k, None) for k in (*_MCP_KEYS, "headers", "env")}
        for key in ("toolset", "transport"):
            obj = getattr(entry, key, None)
            if obj is not None:
                data[key] = f"<{type(obj).__module__}.{type(obj).__qualname__}>"
    elif isinstance(entry, dict):
        data = {k: entry.get(k) for k in (*_MCP_KEYS, "headers", "env")}
        for key in ("toolset", "transport"):
            if entry.get(key) is not None:
                obj = entry[key]
                data[key] = f"<{type(obj).__module__}.{type(obj).__qualname__}>"
    else:
        return {"name": f"<{type(entry).__qualname__}>"}
    data["headers"] = sorted(data.get("headers") or {})  # names only: values may be secrets
    data["env"] = sorted(data.get("env") or {})
    if data.get("session") is None:
        data["session"] = "auto"  # McpServerConfig's default: unset and "auto" are one version
    return {k: _json(v) for k, v in data.items() if v not in (None, [], {})}


def _mcps(cls: type) -> dict[str, Any]:
    from agentd.agent import Agent

    entries = getattr(cls, "_mcp_entries", None)  # a TOML agent's (registry.py)
    if entries is None:
        entries = list(getattr(cls, "mcps", []) or [])
    out: dict[str, Any] = {"servers": [_mcp_entry(e) for e in entries]}
    hook = inspect.getattr_static(cls, "mcp_servers", None)
    if (
        hook is not None
        and hook is not Agent.__dict__["mcp_servers"]
        and (getattr(cls, "_mcp_entries", None) is None)
    ):
        out["computed_by"] = _code_name(hook)
    return out


def _code_digest(code: Any) -> str:
    """A digest of a function's code that is the same in every process (no addresses):
    its bytecode, the names it uses and its constants, nested functions included."""
    h = hashlib.sha256()

    def feed(c: Any) -> None:
        h.update(c.co_code)
        h.update(repr(c.co_names).encode())
        for const in c.co_consts:
            if inspect.iscode(const):
                feed(const)
            else:
                h.update(repr(const).encode())

    feed(code)
    return h.hexdigest()[:16]


def _middlewares(cls: type) -> dict[str, Any]:
    """The agent's own stack edits: "default", or the hook that edits it (its name and a
    digest of its code, so editing the hook is a new version)."""
    from agentd.agent import Agent

    out: dict[str, Any] = {}
    for kind in ("llm", "tool"):
        hook = f"configure_{kind}_middlewares"
        fn = getattr(cls, hook).__func__
        if fn is getattr(Agent, hook).__func__:
            out[kind] = "default"
        else:
            out[kind] = {
                "hook": f"{fn.__module__}.{fn.__qualname__}",
                "code": _code_digest(fn.__code__),
            }
    return out


def _package(cls: type, distributions: Mapping[str, list[str]]) -> dict[str, str] | None:
    """The distribution an agent class comes from and its version; None: agentd's own
    (a TOML agent or agentd.testing: agentd's version is no part of the definition)."""
    top = cls.__module__.split(".")[0]
    if top in ("agentd", "__main__", "builtins"):
        return None
    dists = distributions.get(top) or []
    for dist in dists:
        try:
            return {"name": dist, "version": importlib.metadata.version(dist)}
        except importlib.metadata.PackageNotFoundError:
            continue
    return {"name": top, "version": "unknown"}


def distributions() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions providing it. It scans every
    installed distribution: read it once per set of definitions (`definition`'s caller)."""
    try:
        return {k: list(v) for k, v in importlib.metadata.packages_distributions().items()}
    except Exception:
        return {}


def definition(
    name: str, cls: type, dists: Mapping[str, list[str]] | None = None
) -> dict[str, Any]:
    """The agent's effective definition, as JSON (what its version fingerprints). `dists`:
    `distributions()`, when the caller computes several definitions."""
    configured = bool(getattr(cls, "_configured_as", False))  # a TOML agent: no class
    base = next(
        (k for k in cls.__mro__ if "name" not in k.__dict__ or k.__dict__["name"] != name), cls
    )
    out: dict[str, Any] = {
        "class": "toml" if configured else f"{base.__module__}:{base.__qualname__}",
        "package": _package(base, distributions() if dists is None else dists),
        "system_prompt": _attr(cls, "system_prompt"),
        "approval_required": sorted(_attr(cls, "approval_required") or [])
        if isinstance(_attr(cls, "approval_required"), list)
        else _attr(cls, "approval_required"),
        "limits": {k: _attr(cls, k) for k in LIMITS},
        "compaction_prompt": _attr(cls, "compaction_prompt"),
        "mcps": _mcps(cls),
        "middlewares": _middlewares(cls),
        "version_policy": policy_of(cls),
    }
    for key in _PLAIN:
        out[key] = _attr(cls, key)
    tools = getattr(cls, "_agent_tools", ())
    if tools:  # only when set: an agent without them keeps its fingerprint
        out["agent_tools"] = [t.model_dump(exclude_none=True) for t in tools]
    return out


def policy_of(cls: type) -> str:
    policy = getattr(cls, "version_policy", "pin")
    return policy if policy in POLICIES else "pin"


def fingerprint(name: str, defn: dict[str, Any]) -> str:
    body = json.dumps({"agent": name, "definition": defn}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


def version_id(fp: str) -> str:
    return fp[:16]


# --- what changes between two versions ------------------------------------------------------


def _servers(defn: dict[str, Any]) -> dict[str, dict[str, Any]]:
    mcps = defn.get("mcps") or {}
    return {s.get("name", "?"): s for s in mcps.get("servers", [])}


def tool_name_in(defn: dict[str, Any], server: str, remote_name: str) -> str | None:
    """The name `server`'s tool `remote_name` is advertised under in `defn`; None: the
    version has no such server, or its whitelist leaves the tool out."""
    s = _servers(defn).get(server)
    if s is None:
        return None
    whitelist = s.get("tools")
    if whitelist and remote_name not in whitelist:
        return None
    prefix = s.get("prefix")
    return f"{prefix}{PREFIX_SEPARATOR}{remote_name}" if prefix else remote_name


def diff(
    old: dict[str, Any], new: dict[str, Any], tools: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """What moving a loop from `old` to `new` changes. `tools`: the loop's recorded MCP
    tools ({server, name, remote_name}), to name the tools renamed or removed."""
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    a, b = _servers(old), _servers(new)
    servers = {
        "added": sorted(set(b) - set(a)),
        "removed": sorted(set(a) - set(b)),
        "changed": sorted(n for n in set(a) & set(b) if a[n] != b[n]),
    }
    renamed: list[dict[str, str]] = []
    removed: list[str] = []
    kept: list[str] = []
    for t in tools or []:
        to = tool_name_in(new, t["server"], t["remote_name"])
        if to is None:
            removed.append(t["name"])
        elif to != t["name"]:
            renamed.append({"from": t["name"], "to": to})
        else:
            kept.append(t["name"])
    prefixes = [
        {"server": n, "from": a[n].get("prefix"), "to": b[n].get("prefix")}
        for n in sorted(set(a) & set(b))
        if a[n].get("prefix") != b[n].get("prefix")
    ]
    whitelists = [
        {"server": n, "from": a[n].get("tools"), "to": b[n].get("tools")}
        for n in sorted(set(a) & set(b))
        if a[n].get("tools") != b[n].get("tools")
    ]
    ar_old = set(old.get("approval_required") or [])
    ar_new = set(new.get("approval_required") or [])
    lim_old, lim_new = old.get("limits") or {}, new.get("limits") or {}
    limits = {
        k: {"from": lim_old.get(k), "to": lim_new.get(k)}
        for k in sorted(set(lim_old) | set(lim_new))
        if lim_old.get(k) != lim_new.get(k)
    }
    return {
        "changed": changed,
        "servers": servers,
        "prefixes": prefixes,
        "whitelists": whitelists,
        "tools": {"renamed": renamed, "removed": sorted(removed), "kept": sorted(kept)},
        "approval_required": {
            "added": sorted(ar_new - ar_old),
            "removed": sorted(ar_old - ar_new),
        },
        "limits": limits,
    }


def orphaned(new: dict[str, Any], pending: list[dict[str, Any]]) -> list[str]:
    """The pending calls ({name, server, remote_name}; server None: not an MCP tool of
    the loop) whose tool the version `new` would not advertise under the same name."""
    out = []
    for c in pending:
        if c.get("server") is None:
            continue  # a tool of no MCP server: nothing the version could rename
        if tool_name_in(new, c["server"], c["remote_name"]) != c["name"]:
            out.append(c["name"])
    return sorted(out)

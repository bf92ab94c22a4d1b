"""The secrets agentd's configuration names, made known to a process's `KnownSecrets`.

Both the API and the worker call `remember_configured` with their set, settings and
agents, so each process masks, from its first request on, every secret it could see echoed: the API
operator and read tokens, each agent's provider key (`api_token`, `api_key_env`), MCP
servers' tokens and credential headers (`McpServerConfig` adds a per-loop server's when it
is built), webhook signing secrets and the passwords in webhook URLs. See
docs/security.md, "Secrets in transcripts".
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from agentd import redact

# Header names whose values are credentials (any header whose name holds one of these).
_CREDENTIAL_WORDS = ("auth", "token", "key", "secret", "password", "cookie", "session", "cred")


def header_secrets(headers: Mapping[str, str]) -> list[str]:
    """The credential values among `headers`: the whole value and, for `Bearer x` /
    `Basic x`, the credential after the scheme."""
    out: list[str] = []
    for name, value in headers.items():
        if not isinstance(value, str) or not any(w in name.lower() for w in _CREDENTIAL_WORDS):
            continue
        out.append(value)
        scheme, _, rest = value.strip().partition(" ")
        if rest.strip() and scheme.isalpha():
            out.append(rest.strip())
    return out


def url_password(url: str | None) -> str | None:
    """The password of a URL's userinfo (`https://user:pass@host`), if any."""
    if not url:
        return None
    try:
        return urllib.parse.urlsplit(url).password
    except ValueError:
        return None


def _mcp_secrets(entries: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for e in entries:
        data = e if isinstance(e, Mapping) else getattr(e, "__dict__", {})
        token = data.get("api_token")
        env = data.get("api_token_env")
        out += [token] if isinstance(token, str) else []
        out += [os.environ.get(env, "")] if isinstance(env, str) else []
        headers = data.get("headers")
        out += header_secrets(headers) if isinstance(headers, Mapping) else []
        out += [url_password(data.get("url")) or ""]
        env_vars = data.get("env")
        out += header_secrets(env_vars) if isinstance(env_vars, Mapping) else []
    return out


def configured(settings: Any, registry: Any = None) -> list[str]:
    """Every secret value the settings (`agentd.settings.Settings`) and the agents' class
    attributes (an `agentd.registry.AgentRegistry`) name. Typed loosely: this module sits
    on redact's floor, below both."""
    values: list[str | None] = [
        settings.api_token.get_secret_value() if settings.api_token else None,
        *(t.get_secret_value() for t in settings.read_tokens),
    ]
    for hook in settings.webhooks or ():
        values += [os.environ.get(hook.secret_env), url_password(hook.url)]
        # Several secrets, space-separated, while one is rotated: each is a secret.
        for secret in (os.environ.get(hook.secret_env) or "").split():
            values += [secret, secret.removeprefix("whsec_")]
    for name in registry.names() if registry is not None else ():
        cls = registry.get(name) if registry is not None else None
        token = getattr(cls, "api_token", None)
        env = getattr(cls, "api_key_env", None)
        values += [token if isinstance(token, str) else None]
        values += [os.environ.get(env) if isinstance(env, str) and env else None]
        mcps = getattr(cls, "mcps", None)
        values += _mcp_secrets(mcps) if isinstance(mcps, list) else []
        entries = getattr(cls, "_mcp_entries", None)  # a TOML agent's (registry.py)
        values += _mcp_secrets(entries) if isinstance(entries, list) else []
    return [v for v in values if v]


def remember_configured(secrets: redact.KnownSecrets, settings: Any, registry: Any = None) -> None:
    secrets.remember(*configured(settings, registry), pin=True)

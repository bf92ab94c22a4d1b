"""Bearer-token auth: the operator token may do anything, read tokens may only GET.

Tokens are compared with `hmac.compare_digest`; no token is ever logged or echoed.
"""

from __future__ import annotations

import hmac

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from agentd.api.problems import ApiProblem

_bearer = HTTPBearer(auto_error=False, description="The operator token or a read-only token.")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="agentd"'}


def _matches(given: bytes, secret: str) -> bool:
    return hmac.compare_digest(given, secret.encode())


def principal_of(request: Request, token: str | None) -> tuple[str, str] | None:
    """(role, name) of a token, or None for a missing or unknown one: the `api_token` is
    ("operator", "operator"), a named operator token ("operator", its name), a read token
    ("reader", "reader")."""
    if not token:
        return None
    state = request.app.state.agentd
    given = token.encode()
    named = state.settings.operator_tokens
    # Compare against every token so timing does not reveal which one matched.
    hits = [(name, _matches(given, t.get_secret_value())) for name, t in named.items()]
    readers = [_matches(given, t.get_secret_value()) for t in state.settings.read_tokens]
    if _matches(given, state.api_token):
        return "operator", "operator"
    for name, hit in hits:
        if hit:
            return "operator", name
    return ("reader", "reader") if any(readers) else None


def role_of(request: Request, token: str | None) -> str | None:
    """'operator', 'reader', or None for a missing or unknown token."""
    found = principal_of(request, token)
    return found[0] if found else None


def caller(request: Request) -> str:
    """Who makes this request, as decisions and sends record it: `api:<token name>`."""
    return f"api:{getattr(request.state, 'principal', None) or 'operator'}"


async def require_token(
    request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> str:
    """FastAPI dependency: any valid token for reads, the operator token for mutations."""
    found = principal_of(request, creds.credentials if creds else None)
    if found is None:
        detail = "missing bearer token" if creds is None else "invalid bearer token"
        raise ApiProblem(401, detail, headers=CHALLENGE)
    role, request.state.principal = found
    if role == "reader" and request.method not in READ_METHODS:
        raise ApiProblem(403, "this token is read-only; mutations need the operator token")
    return role

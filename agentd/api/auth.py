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


def role_of(request: Request, token: str | None) -> str | None:
    """'operator', 'reader', or None for a missing or unknown token."""
    if not token:
        return None
    state = request.app.state.agentd
    given = token.encode()
    if _matches(given, state.api_token):
        return "operator"
    readers = [t.get_secret_value() for t in state.settings.read_tokens]
    # Compare against every read token so timing does not reveal which one matched.
    hits = [_matches(given, t) for t in readers]
    return "reader" if any(hits) else None


async def require_token(
    request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> str:
    """FastAPI dependency: any valid token for reads, the operator token for mutations."""
    role = role_of(request, creds.credentials if creds else None)
    if role is None:
        detail = "missing bearer token" if creds is None else "invalid bearer token"
        raise ApiProblem(401, detail, headers=CHALLENGE)
    if role == "reader" and request.method not in READ_METHODS:
        raise ApiProblem(403, "this token is read-only; mutations need the operator token")
    return role

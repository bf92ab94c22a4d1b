"""Admin sessions: the API's tokens, typed once into a login form, then a signed cookie.

The cookie never holds a token. It holds `role.token_id.expires.nonce.mac`: `token_id` and
`mac` are HMAC-SHA256 under a key derived from the operator token, so a session survives a
restart and works on every API replica, ends when its token is rotated or removed, and a
read-only token cannot mint an operator session. Every comparison is `hmac.compare_digest`.
Logging out revokes the session server-side (its nonce goes to `admin_session_revocations`,
checked on every cookie request), so a copied cookie stops working everywhere at once.

POSTs made with the cookie carry a synchronizer token (`csrf` form field or `X-CSRF-Token`
header) derived from the session's nonce; a missing or wrong one is refused with 403. The
cookie is HttpOnly and SameSite=Strict. A request may instead carry the API's
`Authorization: Bearer` header (scripts, curl); a browser never adds that on its own, so
such requests need no CSRF token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from agentd.api.state import AppState
from agentd.db.pool import connection, transaction
from agentd.store import admin_sessions

COOKIE = "agentd_admin"
LOGIN_COOKIE = "agentd_admin_login"  # double-submit token of the login form
FLASH_COOKIE = "agentd_admin_flash"
PATH = "/admin"
SESSION_SECONDS = 12 * 3600
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class AdminDenied(Exception):
    """Refused: 401 (who are you?) or 403 (not allowed, or a bad CSRF token)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Session:
    role: str  # "operator" | "reader"
    via: str  # "cookie" | "bearer"
    csrf: str  # "" for bearer requests
    session_id: str = ""  # the cookie's nonce: what logout revokes ("" for bearer requests)
    expires: int = 0  # when the cookie expires (unix seconds)
    name: str = "operator"  # the token's name (settings.operator_tokens), as actions record it

    @property
    def can_act(self) -> bool:
        return self.role == "operator"


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.agentd
    return state


def _key(state: AppState) -> bytes:
    return hmac.new(state.api_token.encode(), b"agentd/admin/session/v1", hashlib.sha256).digest()


def _mac(key: bytes, *parts: str) -> str:
    return hmac.new(key, ".".join(parts).encode(), hashlib.sha256).hexdigest()


def _token_id(key: bytes, token: str) -> str:
    return _mac(key, "token", token)[:32]


def _principal(state: AppState, same: Callable[[str], bool]) -> tuple[str, str] | None:
    """(role, name) of the one configured token `same` accepts; every token is compared,
    so timing tells nothing."""
    operator = same(state.api_token)
    named = [(n, same(t.get_secret_value())) for n, t in state.settings.operator_tokens.items()]
    readers = [same(t.get_secret_value()) for t in state.settings.read_tokens]
    if operator:
        return "operator", "operator"
    for name, hit in named:
        if hit:
            return "operator", name
    return ("reader", "reader") if any(readers) else None


def principal_of_token(state: AppState, token: str) -> tuple[str, str] | None:
    given = token.encode()
    return _principal(state, lambda t: hmac.compare_digest(given, t.encode()))


def role_of_token(state: AppState, token: str) -> str | None:
    """'operator', 'reader' or None; compares against every token so timing tells nothing."""
    found = principal_of_token(state, token)
    return found[0] if found else None


def _principal_of_token_id(state: AppState, key: bytes, tid: str) -> tuple[str, str] | None:
    return _principal(state, lambda t: hmac.compare_digest(tid, _token_id(key, t)))


def issue(state: AppState, token: str, *, now: float | None = None) -> str | None:
    """A cookie value for `token`, or None if it is no token of ours."""
    role = role_of_token(state, token)
    if role is None:
        return None
    key = _key(state)
    expires = str(int((now if now is not None else time.time()) + SESSION_SECONDS))
    nonce = secrets.token_hex(16)
    tid = _token_id(key, token)
    return ".".join((role, tid, expires, nonce, _mac(key, role, tid, expires, nonce)))


def verify(state: AppState, value: str, *, now: float | None = None) -> Session | None:
    parts = value.split(".")
    if len(parts) != 5:
        return None
    role, tid, expires, nonce, mac = parts
    key = _key(state)
    if not hmac.compare_digest(mac, _mac(key, role, tid, expires, nonce)):
        return None
    if not expires.isdigit() or int(expires) < (now if now is not None else time.time()):
        return None
    # The token it was issued for must still be configured, with the same role.
    found = _principal_of_token_id(state, key, tid)
    if found is None or found[0] != role:
        return None
    return Session(
        role=role,
        via="cookie",
        csrf=_mac(key, "csrf", nonce)[:32],
        session_id=nonce,
        expires=int(expires),
        name=found[1],
    )


async def current(request: Request) -> Session | None:
    """The caller's session from the cookie or a bearer header, or None.

    A cookie must verify (signature, expiry, its token still configured) and must not have
    been revoked by a logout."""
    state = _state(request)
    header = request.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        found = principal_of_token(state, header[7:].strip())
        return Session(role=found[0], via="bearer", csrf="", name=found[1]) if found else None
    value = request.cookies.get(COOKIE)
    session = verify(state, value) if value else None
    if session is None:
        return None
    async with connection(state.pool) as conn:
        if await admin_sessions.is_revoked(conn, session_id=session.session_id):
            return None
    return session


async def revoke(state: AppState, session: Session) -> None:
    """End a cookie session on every replica (logout)."""
    expires_at = datetime.fromtimestamp(session.expires, UTC)
    async with transaction(state.pool) as conn:
        await admin_sessions.revoke(conn, session_id=session.session_id, expires_at=expires_at)


async def require_session(request: Request) -> Session:
    """Dependency of every admin route but login and static files.

    Reads: any session. Writes (POST): an operator session, and with the cookie, the
    session's CSRF token.
    """
    session = await current(request)
    if session is None:
        raise AdminDenied(401, "log in with an agentd token")
    if request.method not in READ_METHODS:
        if not session.can_act:
            raise AdminDenied(403, "this token is read-only; actions need the operator token")
        if session.via == "cookie":
            given = request.headers.get("x-csrf-token")
            if given is None:
                form = await request.form()
                field = form.get("csrf")
                given = field if isinstance(field, str) else ""
            if not given or not hmac.compare_digest(given.encode(), session.csrf.encode()):
                raise AdminDenied(403, "missing or wrong CSRF token; reload the page and retry")
    request.state.admin_session = session
    return session


# --- cookies -------------------------------------------------------------------------------


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_session_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(
        COOKIE,
        value,
        max_age=SESSION_SECONDS,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        COOKIE, path=PATH, httponly=True, samesite="strict", secure=_secure(request)
    )


def login_nonce(request: Request, response: Response) -> str:
    """The login form's double-submit token (set as a cookie, echoed in the form)."""
    value = request.cookies.get(LOGIN_COOKIE) or secrets.token_hex(16)
    response.set_cookie(
        LOGIN_COOKIE,
        value,
        max_age=3600,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return value


def login_nonce_ok(request: Request, given: str) -> bool:
    expected = request.cookies.get(LOGIN_COOKIE, "")
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def set_flash(request: Request, response: Response, kind: str, message: str) -> None:
    """A one-shot message shown by the next page (signed, so no one else can plant one)."""
    body = base64.urlsafe_b64encode(json.dumps([kind, message[:2000]]).encode()).decode()
    value = f"{body}.{_mac(_key(_state(request)), 'flash', body)}"
    response.set_cookie(
        FLASH_COOKIE,
        value,
        max_age=120,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )


def read_flash(request: Request) -> dict[str, Any] | None:
    """The pending flash message; the page that shows it clears the cookie."""
    value = request.cookies.get(FLASH_COOKIE)
    if not value:
        return None
    body, _, mac = value.rpartition(".")
    if not hmac.compare_digest(mac, _mac(_key(_state(request)), "flash", body)):
        return None
    try:
        kind, message = json.loads(base64.urlsafe_b64decode(body.encode()))
    except (ValueError, TypeError):
        return None
    return {"kind": str(kind), "message": str(message)}

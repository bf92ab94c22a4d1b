"""GET/POST /admin/login and POST /admin/logout: the only admin routes without a session."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import Response

from agentd.admin import auth, render

router = APIRouter(prefix="/admin")


def _safe_next(value: object) -> str:
    """Only a path of the admin itself: never another site (`//evil`, `https://...`)."""
    if (
        isinstance(value, str)
        and value.startswith("/admin")
        and not value.startswith("//")
        and "\\" not in value
        and "\n" not in value
        and "\r" not in value
    ):
        return value
    return "/admin"


@router.get("/login", include_in_schema=False)
async def login_page(request: Request) -> Response:
    session = await auth.current(request)
    if session is not None and session.via == "cookie":
        return render.redirect(request, _safe_next(request.query_params.get("next")))
    return _login_response(request, None, 200)


def _login_response(request: Request, error: str | None, status: int, next_: str = "") -> Response:
    # The nonce cookie and the form must agree, so render with the nonce we set.
    probe = Response()
    nonce = auth.login_nonce(request, probe)
    response = render.render(
        request,
        "login.html",
        {
            "error": error,
            "next": _safe_next(next_ or request.query_params.get("next")),
            "nonce": nonce,
        },
        status=status,
    )
    for key, value in probe.headers.items():
        if key == "set-cookie":
            response.headers.append("set-cookie", value)
    return response


@router.post("/login", include_in_schema=False)
async def login(request: Request) -> Response:
    form = await request.form()
    token, nonce, next_ = (form.get(k) for k in ("token", "nonce", "next"))
    next_path = _safe_next(next_)
    if not isinstance(nonce, str) or not auth.login_nonce_ok(request, nonce):
        return _login_response(request, "The login form expired; please try again.", 403, next_path)
    state = request.app.state.agentd
    value = auth.issue(state, token.strip()) if isinstance(token, str) and token.strip() else None
    if value is None:
        return _login_response(request, "That token is not valid.", 401, next_path)
    response = render.redirect(request, next_path)
    auth.set_session_cookie(request, response, value)
    response.delete_cookie(auth.LOGIN_COOKIE, path=auth.PATH)
    return response


@router.post("/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    # A cross-site logout is harmless, but still refused: it needs the page's CSRF token.
    session = await auth.current(request)
    if session is not None and session.via == "cookie":
        form = await request.form()
        given = form.get("csrf")
        if not isinstance(given, str) or not hmac.compare_digest(
            given.encode(), session.csrf.encode()
        ):
            raise auth.AdminDenied(403, "missing or wrong CSRF token; reload the page and retry")
        # Server-side: clearing the cookie alone left any copy of it valid for 12 hours.
        await auth.revoke(request.app.state.agentd, session)
    response = render.redirect(request, "/admin/login")
    auth.clear_session_cookie(request, response)
    return response

"""Templates, their filters, flash redirects, and the admin's refusal pages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi import Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from agentd import __about__
from agentd.admin import auth, forms
from agentd.api import problems
from agentd.llm import prices

PROBLEM_BASE = "https://agentd.dev/problems/"


def _ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    seconds = (datetime.now(UTC) - value).total_seconds()
    if abs(seconds) < 1:
        return "just now"
    if seconds < 0:
        return "in " + _span(-seconds)
    return _span(seconds) + " ago"


def _span(seconds: float) -> str:
    if seconds < 1:
        return "now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _dt(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def _pretty(value: object) -> str:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        value = parsed
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _sections(value: object) -> list[tuple[str, str]]:
    """A wire log as (key, text) parts: raw bodies keep their own line breaks."""
    if isinstance(value, dict):
        return [(str(k), v if isinstance(v, str) else _pretty(v)) for k, v in value.items()]
    return [("", _pretty(value))]


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _money(value: object) -> str:
    """A cost in USD as the admin shows it ("$0.0056"); "" for none (no price known)."""
    if value is None or value == "":
        return ""
    return "$" + (prices.money(Decimal(str(value))) or "0")


def _usage(message: object) -> dict[str, Any]:
    """A message's `metadata.usage` (cost, model, tps...), or {} when it has none."""
    meta = getattr(message, "metadata", None)
    usage = meta.get("usage") if isinstance(meta, dict) else None
    return usage if isinstance(usage, dict) else {}


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("agentd.admin", "templates"),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ago=_ago,
        dt=_dt,
        money=_money,
        usage=_usage,
        pretty=_pretty,
        sections=_sections,
        seconds=_seconds,
        short=lambda v: str(v)[:8],
    )
    env.globals["version"] = __about__.__version__
    return env


templates = Jinja2Templates(env=_env())


def render(
    request: Request, name: str, context: dict[str, Any] | None = None, *, status: int = 200
) -> Response:
    session: auth.Session | None = getattr(request.state, "admin_session", None)
    flash = auth.read_flash(request)
    ctx = {
        "session": session,
        "csrf": session.csrf if session else "",
        "can_act": bool(session and session.can_act),
        "flash": flash,
        "path": request.url.path,
        **(context or {}),
    }
    response = templates.TemplateResponse(request, name, ctx, status_code=status)
    response.headers["Cache-Control"] = "no-store"
    if flash is not None:
        response.delete_cookie(auth.FLASH_COOKIE, path=auth.PATH)
    return response


def redirect(request: Request, to: str, *, flash: tuple[str, str] | None = None) -> Response:
    """303 to `to` (a path of ours), with an optional (kind, message) flash for the next page."""
    response = RedirectResponse(to, status_code=303)
    if flash is not None:
        auth.set_flash(request, response, *flash)
    return response


async def on_denied(request: Request, exc: Exception) -> Response:
    """Browsers get the login page (401) or an HTML refusal; API clients a problem document."""
    assert isinstance(exc, auth.AdminDenied)
    if problems.wants_html(request):
        if exc.status == 401 and request.method in auth.READ_METHODS:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/admin/login?next={quote(target)}", status_code=303)
        return render(
            request, "error.html", {"title": "Not allowed", "detail": exc.detail}, status=exc.status
        )
    slug = "unauthorized" if exc.status == 401 else "forbidden"
    headers = {"WWW-Authenticate": 'Bearer realm="agentd"'} if exc.status == 401 else None
    return JSONResponse(
        {"type": PROBLEM_BASE + slug, "title": slug.title(), "status": exc.status,
         "detail": exc.detail},
        status_code=exc.status,
        headers=headers,
        media_type="application/problem+json",
    )  # fmt: skip


async def on_invalid(request: Request, exc: Exception) -> Response:
    """A field broke a cleaning rule (admin/forms.py): 422, the form error page for browsers,
    the API's validation problem for scripts. Nothing was done."""
    assert isinstance(exc, forms.FormInvalid)
    detail = f"{exc.field}: {exc.message}"
    if problems.wants_html(request):
        return render(
            request, "error.html", {"title": "Invalid input", "detail": detail}, status=422
        )
    return JSONResponse(
        {"type": PROBLEM_BASE + "validation-error", "title": "The request is invalid.",
         "status": 422, "detail": detail,
         "errors": [{"field": exc.field, "message": exc.message}]},
        status_code=422,
        media_type="application/problem+json",
    )  # fmt: skip


def not_found(request: Request, detail: str) -> Response:
    return render(request, "error.html", {"title": "Not found", "detail": detail}, status=404)

"""The API's FastAPI app: REST routes, probes, metrics, docs and the MCP mounts.

The admin UI is not part of it: `agentd.app.create_app` mounts `agentd.admin` on this app,
so the admin imports the API and never the reverse.
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, FastAPI, Request, routing
from fastapi.dependencies.models import Dependant
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPBearer
from pydantic import TypeAdapter
from pydantic.fields import FieldInfo
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from agentd import __about__, known_secrets, redact
from agentd.api import (
    auth,
    body_limit,
    events_tail,
    headers,
    health,
    json_body,
    mcp_server,
    methods,
    metrics,
    problems,
    query_shape,
    routes_approvals,
    routes_batch,
    routes_costs,
    routes_events,
    routes_loop_actions,
    routes_loops,
    routes_providers,
    routes_schedules,
    routes_state,
    routes_webhooks,
    stream_hub,
    streams,
)
from agentd.api.state import AppState

DESCRIPTION = """Control plane of agentd: durable AI agent loops on PostgreSQL.

Every route except `/healthz` and `/readyz` needs `Authorization: Bearer <token>`: the
operator token (`AGENTD_API_TOKEN`) for anything, a read token (`AGENTD_READ_TOKENS`) for
GETs only. Errors are `application/problem+json`. See docs/api.md.

In a browser logged in to the admin UI, this page is also at `/admin/docs`; use
**Authorize** with a token to try requests.
"""

_bearer = HTTPBearer(auto_error=False)


class Api(FastAPI):
    """FastAPI with our OpenAPI document (exact integer bounds, the Problem schema),
    built once on first use."""

    def openapi(self) -> dict[str, Any]:
        if not self.openapi_schema:
            self.openapi_schema = _openapi(self)
        return self.openapi_schema


def create_api(state: AppState) -> FastAPI:
    """The API for `state`, without the admin UI (`agentd.app.create_app` adds it)."""
    app = Api(
        title="agentd",
        version=__about__.__version__,
        description=DESCRIPTION,
        # Served below, behind the token like every other non-probe route.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.agentd = state
    # An echoed token, provider key, MCP credential or webhook secret is masked wherever
    # text is redacted (events, logs, the transcript faces), in any encoding.
    state.secrets.remember(state.api_token, pin=True)
    known_secrets.remember_configured(state.secrets, state.settings, state.registry)
    app.state.stream_hub = stream_hub.StreamHub(
        state.database_url, read_slots=max(1, state.settings.db_pool_max // 2)
    )
    app.state.stream_slots = stream_hub.StreamSlots(state.settings.max_streams_per_token)
    app.state.events_tail = events_tail.FeedTail(
        state.pool, interval=routes_events.POLL_SECONDS, settle=routes_events.SETTLE_SECONDS
    )
    app.state.metrics = metrics.Metrics(state)
    outages = problems.install(app)

    app.include_router(health.router)
    app.include_router(metrics.router)
    v1 = APIRouter(
        prefix="/v1", dependencies=[Depends(auth.require_token), Depends(query_shape.check)]
    )
    v1.include_router(routes_loops.router)
    v1.include_router(routes_loop_actions.router)
    v1.include_router(routes_batch.router)
    v1.include_router(routes_state.router)
    v1.include_router(routes_events.router)
    v1.include_router(routes_webhooks.router)
    v1.include_router(streams.router)
    v1.include_router(routes_approvals.router)
    v1.include_router(routes_approvals.agents_router)
    v1.include_router(routes_schedules.router)
    v1.include_router(routes_providers.router)
    v1.include_router(routes_costs.router)
    app.include_router(v1)
    _add_docs(app)

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/admin", status_code=307)

    mcp_server.mount_all(app, state)

    # Outermost last: CatchAll's 500s and MethodRouting's 405s get the security headers.
    app.add_middleware(json_body.JsonBody)
    app.add_middleware(body_limit.BodyLimit, limit=state.settings.max_body_bytes)
    app.add_middleware(problems.CatchAll, outages=outages)
    app.add_middleware(methods.MethodRouting, router=app.router)
    app.add_middleware(headers.SecurityHeaders)
    app.add_middleware(KnownSecretsScope, secrets=state.secrets)
    return app


class KnownSecretsScope:
    """Every request (and what it starts) redacts with the app's known secrets."""

    def __init__(self, app: ASGIApp, *, secrets: redact.KnownSecrets) -> None:
        self.app = app
        self.secrets = secrets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with redact.installed(self.secrets):
            await self.app(scope, receive, send)


def _add_docs(app: FastAPI) -> None:
    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(auth.require_token)])
    async def openapi_json() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> Response:
        if "authorization" not in request.headers and problems.wants_html(request):
            # A browser sends no bearer token: the admin session's copy of the page.
            return RedirectResponse("/admin/docs", status_code=303)
        await auth.require_token(request, await _bearer(request))
        return get_swagger_ui_html(openapi_url="/openapi.json", title="agentd API")


def _openapi(app: FastAPI) -> dict[str, Any]:
    from fastapi.openapi.utils import get_openapi

    spec = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    _restore_integer_bounds(spec, _declared_integer_bounds(app.routes))
    components = spec.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("Problem", problems.Problem.model_json_schema())
    return spec


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def _declared_integer_bounds(routes: list[BaseRoute]) -> dict[float, int]:
    """Every integer bound the routes declare (parameters and bodies), keyed by its float.

    FastAPI's OpenAPI model types bounds as float, so `le=2**63 - 1` came out as
    9.223372036854776e18 = 2**63: a bound the API itself rejects. This maps it back."""
    found: dict[float, int] = {}

    def collect(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _BOUNDS and type(value) is int:
                    found[float(value)] = value
                else:
                    collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for context in routing.iter_route_contexts(routes):
        route = context.original_route
        if isinstance(route, routing.APIRoute):
            for field in _params(route.dependant):
                declared: Any = Annotated[field.field_info.annotation, field.field_info]
                collect(TypeAdapter(declared).json_schema())
    return found


class _Param(Protocol):
    """What a route's parameter (FastAPI's field: path, query, header, cookie or body)
    offers here: the pydantic FieldInfo it was declared with."""

    @property
    def field_info(self) -> FieldInfo: ...


def _params(dependant: Dependant) -> list[_Param]:
    fields: list[_Param] = [
        *dependant.path_params,
        *dependant.query_params,
        *dependant.header_params,
        *dependant.cookie_params,
        *dependant.body_params,
    ]
    for sub in dependant.dependencies:
        fields += _params(sub)
    return fields


def _restore_integer_bounds(node: object, exact: dict[float, int]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _BOUNDS and isinstance(value, float) and value.is_integer():
                node[key] = exact.get(value, int(value))
            else:
                _restore_integer_bounds(value, exact)
    elif isinstance(node, list):
        for value in node:
            _restore_integer_bounds(value, exact)

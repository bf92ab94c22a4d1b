"""GET /admin/docs and /admin/openapi.json: the API explorer behind the admin session (its
cookie lives under /admin), the same schema as the token-guarded `/openapi.json`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

router = APIRouter(prefix="/admin", include_in_schema=False)


@router.get("/openapi.json")
async def openapi_json(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs")
async def docs() -> HTMLResponse:
    return get_swagger_ui_html(openapi_url="/admin/openapi.json", title="agentd API")

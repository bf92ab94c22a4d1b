"""/v1/providers: each provider key's fleet-wide back-off, limits and current window."""

from __future__ import annotations

from fastapi import APIRouter, Request

from agentd.api import problems
from agentd.api.routes_loops import app_state
from agentd.api.schemas import ConcurrencyKeyOut, ProviderOut, ProvidersOut
from agentd.db.pool import connection
from agentd.store import concurrency_keys, providers

router = APIRouter(tags=["providers"])


@router.get("/providers", summary="Provider limits and back-off", responses=problems.responses(401))
async def list_providers(request: Request) -> ProvidersOut:
    """Provider keys that were throttled or admitted under limits, and busy concurrency keys.

    A provider key is base_url + model + a fingerprint of the api token (never the token).
    """
    state = app_state(request)
    window = state.settings.provider_rate_window
    async with connection(state.pool) as conn:
        rows = await providers.list_(conn, window_seconds=window)
        keys = await concurrency_keys.list_(conn, limit=100)
    return ProvidersOut(
        providers=[ProviderOut.model_validate(r) for r in rows],
        concurrency_keys=[ConcurrencyKeyOut.model_validate(k) for k in keys],
        window_seconds=window,
    )

"""Provider limits: the fleet-wide back-off and rpm/tpm/concurrency admission of a turn.

A provider key is base_url + model + a short sha256 of the api token (the token itself is
never stored or logged). Before a model call, `Gate.admit` checks the key's shared
back-off deadline (as the claim read it, when that was under PREFETCH_FRESH ago) and,
when the agent or a `[providers.*]` table sets limits, admits the call under the provider
row's lock. A turn that may not call now is deferred: handed back
queued on the same generation with its job due when it may (docs/limits.md).
Guarantee: racing admissions on one key, from any worker, never exceed max_concurrency or
rpm; tokens in any window exceed tpm by at most what the admitted estimates under-counted;
no request reaches a provider key before a Retry-After it answered has passed (from the
moment it is recorded, plus at most PREFETCH_FRESH for a turn claimed just before it).
A deferred turn holds no worker slot and no connection.
Tolerates: a worker dying mid-call (its slot lapses with its turn's lease), deferral
racing pause/stop/reap (the deferral is fenced and then writes nothing).
Never: fails a loop for a limit; sleeps on a limit while holding a turn.
Called by: pipeline.llm.network_calling.
"""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agentd import logs
from agentd.db.pool import connection, transaction
from agentd.errors import LLMError, LLMStatusError
from agentd.llm.types import LLMRequest, Provider, Usage
from agentd.pipeline.llm import deferral
from agentd.pipeline.wire import llm_events
from agentd.states import TransitionReason
from agentd.store import providers
from agentd.store.models import NewEvent

if TYPE_CHECKING:
    from agentd.agent import Agent
    from agentd.engine.context import TurnContext
    from agentd.settings import Settings

log = logs.get("agentd.limits")

CHARS_PER_TOKEN = 4  # the admission estimate's rule of thumb; usage corrects it after
# How long the back-offs the claim read stay good enough to admit on (a turn that took
# longer to get here, e.g. through MCP discovery, reads its key's back-off again). A
# Retry-After recorded inside this window can let one more request through, which the
# provider throttles and the gate then records as usual.
PREFETCH_FRESH = 1.0


@dataclass(frozen=True)
class ProviderKey:
    id: str  # what rows are keyed by: a hash of the three below
    base_url: str
    model: str
    key_fingerprint: str  # sha256(api_token)[:12], or "none"

    @classmethod
    def of(cls, provider: Provider) -> ProviderKey:
        base = provider.base_url.rstrip("/")
        token = provider.api_token
        fp = hashlib.sha256(token.encode()).hexdigest()[:12] if token else "none"
        ident = hashlib.sha256(f"{base}\n{provider.model}\n{fp}".encode()).hexdigest()[:16]
        return cls(id=ident, base_url=base, model=provider.model, key_fingerprint=fp)


@dataclass(frozen=True)
class ProviderLimits:
    max_concurrency: int | None = None
    rpm: int | None = None
    tpm: int | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.max_concurrency, self.rpm, self.tpm))


def _int_attr(agent: Agent, name: str) -> int | None:
    value = getattr(agent, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _stricter(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def limits_for(settings: Settings, agent: Agent, provider: Provider) -> ProviderLimits:
    """The stricter of the agent's `provider_*` attributes and every matching table."""
    base = provider.base_url.rstrip("/")
    conc = _int_attr(agent, "provider_max_concurrency")
    rpm = _int_attr(agent, "provider_rpm")
    tpm = _int_attr(agent, "provider_tpm")
    for cfg in settings.providers.values():
        if cfg.base_url.rstrip("/") != base or cfg.model not in (None, provider.model):
            continue
        conc = _stricter(conc, cfg.max_concurrency)
        rpm = _stricter(rpm, cfg.rpm)
        tpm = _stricter(tpm, cfg.tpm)
    return ProviderLimits(max_concurrency=conc, rpm=rpm, tpm=tpm)


def estimate_tokens(request: LLMRequest) -> int:
    """Tokens a call will cost, before it is made: the prompt at ~4 characters a token,
    plus the completion's `max_tokens` when the agent sets one."""
    chars = 0
    for m in request.messages:
        chars += len(m.content or "") + len(m.reasoning or "")
        for c in m.tool_calls:
            chars += len(c.name) + len(c.raw_arguments or "") + len(str(c.arguments or ""))
    for t in request.tools:
        chars += len(t.name) + len(t.description) + len(str(t.input_schema))
    return chars // CHARS_PER_TOKEN + 1 + (request.max_tokens or 0)


class Gate:
    """One turn's passage through its provider key's limits (made by NetworkCalling)."""

    def __init__(self, ctx: TurnContext, provider: Provider) -> None:
        assert ctx.agent is not None
        self.ctx = ctx
        self.key = ProviderKey.of(provider)
        self.limits = limits_for(ctx.runtime.settings, ctx.agent, provider)
        self.request_id: int | None = None
        self.blocked_until: datetime | None = None  # set when this turn was throttled

    async def admit(self) -> bool:
        """True: call now. False: the turn was deferred (or lost its fence); stop here."""
        ctx = self.ctx
        rt = ctx.runtime
        settings = rt.settings
        if not self.limits:
            pre = ctx.prefetch
            if pre is not None and time.monotonic() - pre.claimed_at <= PREFETCH_FRESH:
                # The claim read every back-off a moment ago: no query on the hot path.
                until = pre.backoffs.get(self.key.id)
                if until is not None and until <= datetime.now(UTC):
                    until = None
            else:
                async with connection(rt.pool) as conn:
                    until = await providers.blocked_until(conn, provider_id=self.key.id)
            if until is None:
                return True
            await self._defer(until, TransitionReason.PROVIDER_BACKOFF)
            return False
        assert ctx.request is not None
        lim = self.limits
        retry = settings.provider_retry_interval * (1 + random.random() / 2)
        async with transaction(rt.pool) as conn:
            await providers.lock(
                conn,
                provider_id=self.key.id,
                base_url=self.key.base_url,
                model=self.key.model,
                key_fingerprint=self.key.key_fingerprint,
                max_concurrency=lim.max_concurrency,
                rpm=lim.rpm,
                tpm=lim.tpm,
            )
            adm = await providers.admit(
                conn,
                provider_id=self.key.id,
                loop_id=ctx.loop.id,
                execution_token=ctx.execution_token,
                max_concurrency=lim.max_concurrency,
                rpm=lim.rpm,
                tpm=lim.tpm,
                estimate=estimate_tokens(ctx.request),
                retry_seconds=retry,
                window_seconds=settings.provider_rate_window,
            )
        if adm.admitted:
            self.request_id = adm.request_id
            return True
        assert adm.reason is not None and adm.retry_at is not None
        await self._defer(adm.retry_at, adm.reason)
        return False

    async def on_throttled(self, err: LLMStatusError) -> bool:
        """The client's hook: record the back-off for the whole fleet and stop retrying."""
        assert err.retry_after is not None
        seconds = min(err.retry_after, self.ctx.runtime.settings.provider_backoff_max)
        async with connection(self.ctx.runtime.pool) as conn:
            self.blocked_until = await providers.block(
                conn,
                provider_id=self.key.id,
                base_url=self.key.base_url,
                model=self.key.model,
                key_fingerprint=self.key.key_fingerprint,
                seconds=seconds,
                status=err.status_code,
            )
        log.warning(
            "provider.throttled",
            provider=self.key.id,
            base_url=self.key.base_url,
            model=self.key.model,
            status=err.status_code,
            retry_after=seconds,
            loop_id=str(self.ctx.loop.id),
        )
        return True

    async def deferred_after(self, exc: LLMError) -> bool:
        """After a failed call: if it was throttled, defer the turn to the deadline."""
        if self.blocked_until is None:
            return False
        await self.settle(None, tokens=0)  # the provider refused it: it cost no tokens
        wire = llm_events(
            getattr(exc, "exchanges", None) or [],
            loop_id=self.ctx.loop.id,
            hints=self.ctx.runtime.wire_hints,
        )
        exc.exchanges = []  # type: ignore[attr-defined]  # recorded here, once
        await self._defer(self.blocked_until, TransitionReason.PROVIDER_BACKOFF, wire=wire)
        return True

    async def settle(self, usage: Usage | None, *, tokens: int | None = None) -> None:
        """Free the concurrency slot and charge what the provider reported."""
        if self.request_id is None:
            return
        if tokens is None and usage is not None:
            tokens = usage.total_tokens
        request_id, self.request_id = self.request_id, None
        async with connection(self.ctx.runtime.pool) as conn:
            await providers.settle(conn, request_id=request_id, tokens=tokens)

    async def _defer(
        self, run_at: datetime, reason: str, *, wire: list[NewEvent] | None = None
    ) -> None:
        ctx = self.ctx
        notes: list[NewEvent] = []
        if wire or reason == TransitionReason.PROVIDER_BACKOFF:
            # Throttling is worth a line in the transcript; a turn waiting its turn under
            # max_concurrency (retried every second) is not.
            notes = [
                *(wire or []),
                NewEvent(
                    name="turn.deferred",
                    loop_id=ctx.loop.id,
                    reason=reason,
                    log=f"provider {self.key.base_url} {self.key.model} until {run_at.isoformat()}",
                ),
            ]
        if not await deferral.defer_turn(ctx, run_at, reason, notes):
            log.info("turn.fence_lost", loop_id=str(ctx.loop.id), while_="deferring")
            return
        log.info(
            "turn.deferred",
            loop_id=str(ctx.loop.id),
            reason=reason,
            provider=self.key.id,
            until=run_at.isoformat(),
        )

"""WebhookDeliverer: POSTs webhook deliveries, signed per Standard Webhooks, until delivered.

The deliveries are written by database triggers (migrations 0013/0014) in the transaction
that made their event happen, one per subscribed endpoint; this service is their consumer.
Each attempt carries `webhook-id` (the delivery's message id, the same on every attempt, so
receivers dedupe on it), `webhook-timestamp` and `webhook-signature` (`v1,` + base64
HMAC-SHA256 of `id.timestamp.body`, made by the `standardwebhooks` package).

Guarantee: at-least-once. A delivery is claimed under a lease (SKIP LOCKED), so two workers
never send it at the same time; its outcome is written only under that lease. A 2xx marks
it delivered; 410 Gone fails it and disables its endpoint (fleet-wide, with a
`webhook.endpoint_disabled` event) until a worker starts with it in its config again;
anything else (a status, a timeout, a refused connection) retries it with exponential
back-off (±20% jitter) until `max_attempts`, then marks it failed. Every attempt is signed
with each of the endpoint's secrets (several while one is rotated).
Tolerates: a SIGKILL mid-attempt (the claim treats a lease whose worker's heartbeat backend
is gone as free, so another worker re-sends at once, with the same webhook-id); any number
of deliverers; endpoints removed from the config (disabled: nothing new is queued for them).
Never: holds a pooled connection during an HTTP request; stores or logs a secret, or sends
one it can recognise (bodies are scrubbed like events).
Called by: engine.service (processes running the maintenance queue).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import random
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import httpx
import standardwebhooks

from agentd import __about__, logs, redact
from agentd.db.pool import Pool, connection, transaction
from agentd.engine.ticks import Signal
from agentd.errors import ConfigError
from agentd.event_names import EventName
from agentd.settings import Settings, WebhookConfig
from agentd.states import WebhookAttempt
from agentd.store import events, webhooks
from agentd.store.models import NewEvent
from agentd.store.webhooks import Delivery

log = logs.get("agentd.webhooks")

BATCH = 16
GONE = 410  # the receiver asks to be disabled: no retry, the endpoint is switched off
LEASE_MARGIN = 30.0  # a lease outlives the attempt's timeout by this much


@dataclass
class DeliveryReport:
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    fence_lost: int = 0

    def __bool__(self) -> bool:
        return any(asdict(self).values())


@dataclass(frozen=True)
class _Target:
    config: WebhookConfig
    signer: Signers


def backoff(config: WebhookConfig, attempts: int, *, jitter: float = 0.2) -> float:
    """Seconds before attempt `attempts + 1`: base * 2**(attempts-1), capped, ±jitter."""
    delay = min(config.retry_base_delay * 2 ** max(attempts - 1, 0), config.retry_max_delay)
    return float(delay * random.uniform(1 - jitter, 1 + jitter))


#: Standard Webhooks: a secret is `whsec_` + base64 of 24 to 64 random bytes.
SECRET_PREFIX = "whsec_"
SECRET_BYTES = (24, 64)


def _secret_problem(secret: str) -> str | None:
    """What is wrong with one secret (never quoting it), or None."""
    if not secret.startswith(SECRET_PREFIX):
        return "does not start with whsec_"
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return "is not whsec_ followed by base64"
    low, high = SECRET_BYTES
    if not low <= len(key) <= high:
        return f"decodes to {len(key)} bytes, not {low} to {high}"
    return None


@dataclass(frozen=True)
class Signers:
    """The endpoint's secrets: the env var holds one, or several separated by spaces while
    a secret is rotated. Every attempt is signed with each (`webhook-signature` is the
    space-separated list of their `v1,` signatures, as the Standard Webhooks spec allows),
    so a receiver holding either the old or the new secret verifies it."""

    webhooks: tuple[standardwebhooks.Webhook, ...]

    def sign(self, msg_id: str, timestamp: datetime, body: str) -> str:
        return " ".join(w.sign(msg_id, timestamp, body) for w in self.webhooks)


def signer_for(config: WebhookConfig) -> Signers:
    """The endpoint's signers, or ConfigError (exit 2) naming the variable and what is
    wrong: unset, not `whsec_` + base64, or not 24 to 64 bytes once decoded."""
    value = os.environ.get(config.secret_env)
    secrets = (value or "").split()
    if not secrets:
        raise ConfigError(
            f"[[webhooks]] {config.url}: environment variable {config.secret_env} is not set"
        )
    for n, secret in enumerate(secrets, 1):
        problem = _secret_problem(secret)
        if problem is not None:
            which = f"secret {n} of {len(secrets)} in " if len(secrets) > 1 else ""
            raise ConfigError(
                f"[[webhooks]] {config.url}: {which}{config.secret_env} {problem}: a Standard "
                "Webhooks secret is whsec_ followed by base64 of 24 to 64 random bytes, e.g. "
                '"whsec_$(openssl rand -base64 32)"'
            )
    return Signers(tuple(standardwebhooks.Webhook(s) for s in secrets))


class WebhookDeliverer:
    def __init__(
        self,
        settings: Settings,
        pool: Pool,
        *,
        worker_id: uuid.UUID,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.worker_id = worker_id
        self.http = http
        self.targets: dict[int, _Target] = {}
        self.woken = asyncio.Event()
        self.attempted = Signal()

    def wake(self) -> None:
        self.woken.set()

    async def sync_config(self) -> None:
        """Make the endpoint table match `[[webhooks]]` (absent ones are disabled); every
        secret must be in the environment, or the process does not start. A config that
        names no webhooks at all changes nothing (`webhooks = []` disables every one)."""
        if self.settings.webhooks is None:
            return  # no [[webhooks]] in this process's config: leave the fleet's endpoints be
        signers = [(c, signer_for(c)) for c in self.settings.webhooks]
        targets: dict[int, _Target] = {}
        async with transaction(self.pool) as conn:
            for config, signer in signers:
                row = await webhooks.upsert_endpoint(
                    conn, url=config.url, events=config.events, secret_env=config.secret_env
                )
                targets[row.id] = _Target(config, signer)
            await webhooks.disable_other_endpoints(conn, keep_ids=list(targets))
        self.targets = targets
        if targets:
            log.info("webhooks.synced", endpoints=len(targets))

    async def run(self, stop: asyncio.Event) -> None:
        if not self.targets:
            return
        own_http = self.http is None
        if own_http:
            self.http = httpx.AsyncClient(follow_redirects=False)
        try:
            while not stop.is_set():
                try:
                    report = await self.deliver_once()
                except Exception:
                    log.exception("webhooks.deliver_failed")
                    report = DeliveryReport()
                if report:
                    log.info("webhooks.delivered", **asdict(report))
                    continue  # a full or partial batch: look again before sleeping
                self.woken.clear()
                waits = [asyncio.ensure_future(self.woken.wait())]
                waits.append(asyncio.ensure_future(stop.wait()))
                _, pending = await asyncio.wait(
                    waits, timeout=self.settings.poll_interval, return_when="FIRST_COMPLETED"
                )
                for w in pending:
                    w.cancel()
        finally:
            if own_http and self.http is not None:
                await self.http.aclose()
                self.http = None

    async def deliver_once(self) -> DeliveryReport:
        """Claim the due deliveries of this process's endpoints and attempt each once."""
        report = DeliveryReport()
        if not self.targets:
            return report
        lease = max(t.config.timeout for t in self.targets.values()) + LEASE_MARGIN
        token = uuid.uuid4()
        async with connection(self.pool) as conn:
            claimed = await webhooks.claim(
                conn,
                endpoint_ids=list(self.targets),
                lease_token=token,
                worker_id=self.worker_id,
                lease_seconds=lease,
                limit=BATCH,
            )
        if not claimed:
            return report
        outcomes = await asyncio.gather(*(self._attempt(d, token) for d in claimed))
        for outcome in outcomes:
            setattr(report, outcome, getattr(report, outcome) + 1)
        self.attempted.fire()
        return report

    async def _attempt(self, d: Delivery, token: uuid.UUID) -> WebhookAttempt:
        target = self.targets[d.endpoint_id]
        config = target.config
        # Scrubbed like events (an error message can echo a provider's key); signed as sent.
        body = json.dumps(redact.scrub(d.payload), separators=(",", ":"), ensure_ascii=False)
        now = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "user-agent": f"agentd/{__about__.__version__}",
            "webhook-id": d.message_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": target.signer.sign(d.message_id, now, body),
        }
        status: int | None = None
        error: str | None = None
        assert self.http is not None
        try:
            resp = await self.http.post(
                config.url, content=body.encode(), headers=headers, timeout=config.timeout
            )
            status = resp.status_code
            if status == GONE:
                error = f"HTTP 410 Gone: the endpoint asked to be disabled: {resp.text[:200]}"
            elif not 200 <= status < 300:
                error = f"HTTP {status}: {resp.text[:300]}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        delivered = error is None
        gone = status == GONE
        retry = (
            None
            if delivered or gone or d.attempts >= config.max_attempts
            else backoff(config, d.attempts)
        )
        # The attempt happened: record it even if this task is being cancelled.
        row = await asyncio.shield(self._finish(d, token, delivered, status, error, retry))
        if gone:
            await asyncio.shield(self._disable_gone(d))
        if row is None:
            log.info("webhooks.fence_lost", delivery=d.id)
            return WebhookAttempt.FENCE_LOST
        if delivered:
            return WebhookAttempt.DELIVERED
        log.warning(
            "webhooks.attempt_failed",
            delivery=d.id,
            url=redact.text(config.url),
            attempts=d.attempts,
            error=redact.text(error or ""),
            retry_in=retry,
        )
        return WebhookAttempt.RETRIED if retry is not None else WebhookAttempt.FAILED

    async def _disable_gone(self, d: Delivery) -> None:
        """410 Gone: the receiver asks not to be sent anything more (Standard Webhooks).
        Disable the endpoint fleet-wide (claims skip disabled endpoints), fail its idle
        pending deliveries, and say so in the event feed and the log, once."""
        target = self.targets.pop(d.endpoint_id, None)
        url = redact.text(target.config.url if target else "")
        async with transaction(self.pool) as conn:
            endpoint = await webhooks.disable_gone(
                conn,
                endpoint_id=d.endpoint_id,
                last_error="endpoint disabled: it answered 410 Gone",
            )
            if endpoint is None:
                return  # another attempt (or process) disabled it first
            await events.insert_many(
                conn,
                [
                    NewEvent(
                        name=EventName.WEBHOOK_ENDPOINT_DISABLED,
                        reason="gone",
                        url=url,
                        status=GONE,
                        log=json.dumps(
                            {
                                "endpoint_id": d.endpoint_id,
                                "delivery_id": d.id,
                                "failed_deliveries": endpoint.failed,
                            }
                        ),
                    )
                ],
            )
        log.warning(
            "webhooks.endpoint_disabled",
            reason="gone",
            url=url,
            endpoint=d.endpoint_id,
            failed_deliveries=endpoint.failed,
            hint="a worker starting with it in [[webhooks]] enables it again",
        )

    async def _finish(
        self,
        d: Delivery,
        token: uuid.UUID,
        delivered: bool,
        status: int | None,
        error: str | None,
        retry: float | None,
    ) -> Delivery | None:
        async with connection(self.pool) as conn:
            return await webhooks.finish(
                conn,
                delivery_id=d.id,
                lease_token=token,
                delivered=delivered,
                last_status=status,
                last_error=redact.text(error) if error else None,
                retry_delay=retry,
            )

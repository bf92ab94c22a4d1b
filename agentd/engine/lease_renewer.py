"""LeaseRenewer: the one heartbeat per process.

Guarantee: every registered LLM lease and tool lease is renewed in one batched statement
each per tick, on one dedicated connection (outside the pool). A registration the database
did not renew (token rotated by pause/stop/reaper) has its task cancelled at once and
writes nothing. A lease is trusted only until `renew_started_at + lease - margin/2`; past
that with no successful renewal (database unreachable) the turn is cancelled too.
Registrations older than max_duration + lease_leak_grace are dropped (no immortal leases).
A turn or tool call this process gives up because the database is away (its pipeline hit
a lost connection, or its lease went untrusted) is owed back: the release is retried
every ~heartbeat (at most 1 s) until the database answers, so the work moves again within
a second or so of the database's return instead of waiting out its lease (660 s).
The same connection holds the worker's registry row, so its backend identity is what the
Reaper's liveness check looks for.
Tolerates: database restarts (reconnects with backoff and re-registers).
Never: renews a lease whose token changed.
Releases owed after an outage are kept by engine.owed_releases.
Called by: engine.service (run), worker (register/unregister).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from dataclasses import dataclass, field

from agentd import __about__, logs
from agentd.db import pool as dbpool
from agentd.engine.owed_releases import OwedReleases
from agentd.engine.ticks import Signal, ticks
from agentd.errors import DatabaseError
from agentd.settings import Settings
from agentd.store import loops, tool_calls, workers

log = logs.get("agentd.lease_renewer")


@dataclass
class Lease:
    key: uuid.UUID | tuple[str, int]  # loop uuid, or ("tool", tool call id)
    token: uuid.UUID
    seconds: float
    task: asyncio.Task[object] | None
    ceiling: float  # monotonic time after which the registration is dropped
    trusted_until: float
    lost: bool = False
    settled: bool = False  # its work committed: nothing left to renew, fence or cancel
    reason: str = ""
    meta: dict[str, object] = field(default_factory=dict)


class LeaseRenewer:
    def __init__(
        self,
        settings: Settings,
        url: str,
        *,
        worker_id: uuid.UUID,
        hostname: str,
        queues: list[str],
        agent_versions: list[str] | None = None,
    ) -> None:
        self.settings = settings
        self.url = url
        self.worker_id = worker_id
        self.hostname = hostname
        self.queues = queues
        self.agent_versions = list(agent_versions or [])  # published in the worker row
        self._llm: dict[uuid.UUID, Lease] = {}
        self._tools: dict[int, Lease] = {}
        self._conn: dbpool.Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self.renewed = Signal()
        # Work given up while the database was away, owed back to the queue (see release_*).
        self._debt = OwedReleases()
        self.released = self._debt.released
        self.lost_count = 0
        self.renewal_count = 0
        self.last_ok: float | None = None

    # --- registrations ------------------------------------------------------------------

    def _new(
        self,
        key: uuid.UUID | tuple[str, int],
        token: uuid.UUID,
        seconds: float,
        max_duration: float,
        task: asyncio.Task[object] | None,
    ) -> Lease:
        now = time.monotonic()
        return Lease(
            key=key,
            token=token,
            seconds=seconds,
            task=task,
            ceiling=now + max_duration + self.settings.lease_leak_grace,
            trusted_until=now + seconds - self.settings.lease_margin / 2,
        )

    def register_turn(
        self,
        loop_id: uuid.UUID,
        token: uuid.UUID,
        seconds: float,
        max_duration: float,
        task: asyncio.Task[object] | None,
    ) -> Lease:
        lease = self._new(loop_id, token, seconds, max_duration, task)
        self._supersede(self._llm.get(loop_id), token)
        self._llm[loop_id] = lease
        return lease

    def register_tool(
        self, tool_call_id: int, token: uuid.UUID, seconds: float, task: asyncio.Task[object] | None
    ) -> Lease:
        lease = self._new(
            ("tool", tool_call_id), token, seconds, self.settings.default_tool_timeout, task
        )
        self._supersede(self._tools.get(tool_call_id), token)
        self._tools[tool_call_id] = lease
        return lease

    def _supersede(self, old: Lease | None, token: uuid.UUID) -> None:
        # This process claimed the same loop (or call) again under a new token, so the
        # earlier claim was taken from it (reaped, released): that turn is stale. Replacing
        # its registration silently would leave it running with nobody to cancel it.
        if old is not None and old.token != token:
            self._lose(old, "token_rotated")

    def unregister(self, lease: Lease) -> None:
        if isinstance(lease.key, uuid.UUID):
            if self._llm.get(lease.key) is lease:
                del self._llm[lease.key]
        else:
            _, tid = lease.key
            if self._tools.get(tid) is lease:
                del self._tools[tid]

    def settle_turn(self, loop_id: uuid.UUID, token: uuid.UUID) -> None:
        """The turn under `token` committed its result: drop its lease without cancelling.

        Called by the finalizer right after its commit. The commit ends the lease in the
        database (the loop completes, or passes to its tool phase or a new generation), so a
        tick landing before the turn unwinds would otherwise read it as taken and cancel a
        turn that finished (logged and counted as a lost lease, its chained work handed back).
        """
        self._settle(self._llm.get(loop_id), token)

    def settle_tool(self, tool_call_id: int, token: uuid.UUID) -> None:
        """The tool call under `token` committed its result (see `settle_turn`)."""
        self._settle(self._tools.get(tool_call_id), token)

    def _settle(self, lease: Lease | None, token: uuid.UUID) -> None:
        if lease is not None and lease.token == token and not lease.lost:
            lease.settled = True
            self.unregister(lease)

    def in_flight(self) -> tuple[list[Lease], list[Lease]]:
        return list(self._llm.values()), list(self._tools.values())

    def revoke(self, lease: Lease, reason: str) -> None:
        """Revoke a registration from outside the tick (a pause/stop/regenerate NOTIFY): the
        same one-shot loss as a failed renewal, so a turn told twice is cancelled once."""
        self._lose(lease, reason, counted=False)  # told, not lost: not a lease_lost metric

    def _lose(self, lease: Lease, reason: str, *, counted: bool = True) -> None:
        # Once only: a second cancel() lands while the turn is unwinding (closing its
        # provider stream) and interrupts that cleanup, leaving the stream uncut.
        if lease.lost or lease.settled:
            return
        lease.lost = True
        lease.reason = reason
        self.lost_count += counted
        self.unregister(lease)
        if lease.task is not None and not lease.task.done():
            lease.task.cancel(f"lease lost: {reason}")
        log.info("lease.lost", key=str(lease.key), reason=reason)
        if reason == "untrusted":
            # Cancelled because the database could not be reached to renew it: the lease
            # itself may still be valid there. Hand it back once the database answers.
            self._owe(lease.key, lease.token)

    # --- releases owed after an outage --------------------------------------------------

    def release_turn(self, loop_id: uuid.UUID, token: uuid.UUID) -> None:
        """The turn under `token` gave up because the database was away (its pipeline hit
        a lost connection): stop renewing it and give it back to the queue as soon as the
        database answers (fenced by the token, so a turn that moved on is left alone)."""
        self._settle(self._llm.get(loop_id), token)
        self._owe(loop_id, token)

    def release_tool(self, tool_call_id: int, token: uuid.UUID) -> None:
        """The tool call under `token` gave up because the database was away (see
        `release_turn`); a checkpointed result is kept."""
        self._settle(self._tools.get(tool_call_id), token)
        self._owe(("tool", tool_call_id), token)

    def _owe(self, key: uuid.UUID | tuple[str, int], token: uuid.UUID) -> None:
        self._debt.owe(key, token)

    def owed(self) -> tuple[dict[uuid.UUID, uuid.UUID], dict[int, uuid.UUID]]:
        return self._debt.owed()

    @property
    def released_count(self) -> int:
        return self._debt.released_count

    async def release_owed(self) -> int:
        """Give the owed work back in one transaction; raises DatabaseError if the database
        is still away (the caller retries). Returns how many were sent back."""
        async with self._lock:
            if self._closed:
                return 0
            return await self._release_owed()

    async def _release_owed(self) -> int:
        if self._debt.empty():
            return 0
        try:
            with dbpool.translate_pg_errors():
                if self._conn is None or self._conn.is_closed():
                    await self.connect()
                assert self._conn is not None
                return await self._debt.send(self._conn)
        except DatabaseError:
            await self._close(deregister=False)
            raise

    async def _run_releases(self, stop: asyncio.Event) -> None:
        cap = min(1.0, self.settings.heartbeat_interval)
        delay = min(0.2, cap)
        while not stop.is_set():
            if self._debt.empty():
                self._debt.wake.clear()
                waiters = {
                    asyncio.ensure_future(self._debt.wake.wait()),
                    asyncio.ensure_future(stop.wait()),
                }
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waiters:
                        w.cancel()
                continue
            try:
                await self.release_owed()
                delay = min(0.2, cap)
            except DatabaseError as exc:
                log.info("lease_renewer.release_pending", error=str(exc), retry_in=delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                delay = min(delay * 2, cap)

    # --- connection -----------------------------------------------------------------------

    async def connect(self) -> None:
        self._closed = False
        self._conn = await dbpool.connect(self.url, application_name="agentd-heartbeat")
        await self._register()

    async def _register(self) -> None:
        assert self._conn is not None
        await workers.register(
            self._conn,
            worker_id=self.worker_id,
            hostname=self.hostname,
            pid=os.getpid(),
            queues=self.queues,
            version=__about__.__version__,
            agent_versions=self.agent_versions,
        )

    # The heartbeat connection is shared by the tick and the shutdown steps, which run in
    # other tasks; asyncpg refuses a second operation in flight on one connection, and a
    # failed tick closes it, so every use takes the lock.

    async def close(self, *, deregister: bool = True) -> None:
        async with self._lock:
            self._closed = True
            if self._conn is not None and not self._conn.is_closed():
                with contextlib.suppress(DatabaseError):
                    await self._release_owed()  # last chance, on a live connection only
            await self._close(deregister=deregister)

    async def _close(self, *, deregister: bool) -> None:
        if self._conn is not None:
            if deregister:
                with contextlib.suppress(Exception):
                    await workers.delete(self._conn, worker_id=self.worker_id)
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None

    async def set_stopping(self) -> None:
        async with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    await workers.set_stopping(self._conn, worker_id=self.worker_id)

    def _trust(self, started: float, lease: Lease, remaining: float | None = None) -> float:
        # Counted from when the renewal started, not when the reply arrived, and from what
        # the database says is left (a lease is rewritten only once under half is left).
        left = lease.seconds if remaining is None else min(remaining, lease.seconds)
        return started + left - self.settings.lease_margin / 2

    # --- the tick ---------------------------------------------------------------------------

    async def renew_once(self) -> None:
        async with self._lock:
            if not self._closed:
                await self._renew()

    async def _renew(self) -> None:
        now = time.monotonic()
        for lease in [*self._llm.values(), *self._tools.values()]:
            if now > lease.ceiling:
                self._lose(lease, "leak_ceiling")
        started = time.monotonic()
        try:
            # a dedicated connection, outside db.pool.connection(): translate here too
            with dbpool.translate_pg_errors():
                if self._conn is None or self._conn.is_closed():
                    await self.connect()
                assert self._conn is not None
                # The dicts are keyed by loop id / tool call id: keys and values stay aligned.
                llm_ids, llm = list(self._llm), list(self._llm.values())
                ids, tools = list(self._tools), list(self._tools.values())
                # A lease skipped now must still have time left at the next tick.
                within = 2 * self.settings.heartbeat_interval
                if llm:
                    kept = await loops.renew_leases(
                        self._conn,
                        ids=llm_ids,
                        tokens=[x.token for x in llm],
                        renew_within=within,
                    )
                    for lease, loop_id in zip(llm, llm_ids, strict=True):
                        if loop_id in kept:
                            lease.trusted_until = self._trust(started, lease, kept[loop_id])
                        else:
                            self._lose(lease, "token_rotated")
                if tools:
                    kept_t = await tool_calls.renew_leases(
                        self._conn,
                        ids=ids,
                        tokens=[x.token for x in tools],
                        seconds=[x.seconds for x in tools],
                        renew_within=within,
                    )
                    for lease, tid in zip(tools, ids, strict=True):
                        if tid in kept_t:
                            lease.trusted_until = self._trust(started, lease, kept_t[tid])
                        else:
                            self._lose(lease, "tool_lease_revoked")
                alive = await workers.heartbeat(self._conn, worker_id=self.worker_id)
                if not alive:
                    # Declared dead (e.g. a long stall): re-register; our work was reclaimed and
                    # every fence will reject this process's stale writes.
                    await self._register()
                self.renewal_count += 1
                self.last_ok = time.monotonic()
                self.renewed.fire()
        except DatabaseError as exc:
            log.warning("lease_renewer.failed", error=str(exc))
            await self._close(deregister=False)
            now = time.monotonic()
            for lease in [*self._llm.values(), *self._tools.values()]:
                if now > lease.trusted_until:
                    self._lose(lease, "untrusted")

    async def run(self, stop: asyncio.Event) -> None:
        releases = asyncio.create_task(self._run_releases(stop), name="lease-releases")
        try:
            async for _ in ticks(self.settings.heartbeat_interval, stop, jitter=0.05):
                await self.renew_once()
        finally:
            if not releases.done() and not stop.is_set():
                releases.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await releases

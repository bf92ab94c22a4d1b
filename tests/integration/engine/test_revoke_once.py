"""A turn told to stop twice (a pause/stop/regenerate NOTIFY and the lease loss the same
rotation causes) is cancelled once: its unwinding (closing the provider stream) is never
interrupted by a second cancel."""

from __future__ import annotations

import asyncio
import json
import uuid

from agentd.db.pool import Pool, transaction
from agentd.engine.lease_renewer import LeaseRenewer
from agentd.registry import AgentRegistry
from agentd.testing import factories
from agentd.testing.engine import eventually, fast_settings, running_engine


class FakeTurn:
    """A turn streaming from a provider: on cancel it closes the stream, which awaits."""

    def __init__(self) -> None:
        self.cut = asyncio.Event()  # the stream was closed to the end
        self.unwinding = asyncio.Event()

    async def __call__(self) -> None:
        try:
            await asyncio.Event().wait()  # reading the stream
        except asyncio.CancelledError:
            self.unwinding.set()
            await asyncio.sleep(0.2)  # the provider connection's close handshake
            self.cut.set()
            raise


async def test_a_turn_revoked_by_control_then_by_its_lease_is_cancelled_once(
    pool: Pool, database_url: str, registry: AgentRegistry
) -> None:
    async with running_engine(pool, database_url, registry, queues=["maintenance"]) as engine:
        async with transaction(pool) as conn:
            loop = await factories.loop(conn, status="running", lease_in=30)
        assert loop.execution_token is not None
        turn = FakeTurn()
        worker, renewer = engine.worker, engine.renewer
        assert renewer is not None
        worker._spawn("llm", loop.id, turn(), token=loop.execution_token)
        (task,) = [t for t, i in worker.tasks.items() if i["loop_id"] == loop.id]
        lease = renewer.register_turn(loop.id, loop.execution_token, 12.0, 60.0, task)  # type: ignore[arg-type]
        worker.tasks[task]["lease"] = lease
        # The regenerate rotates the token and NOTIFYs; the worker hears it first ...
        async with transaction(pool) as conn:
            await factories.set_loop(conn, loop.id, execution_token=uuid.uuid4())
        payload = {"loop_id": str(loop.id), "action": "regenerate"}
        worker.on_control(json.dumps(payload))
        worker.on_control(json.dumps(payload))  # ... and a re-sent NOTIFY
        await asyncio.wait_for(turn.unwinding.wait(), 5)
        # ... then the heartbeat finds the rotated token while the turn is unwinding.
        await renewer.renew_once()
        await asyncio.wait({task}, timeout=5)
        assert task.cancelled()
        assert turn.cut.is_set(), "a second cancel interrupted the stream's close"
        assert renewer.in_flight() == ([], [])


async def test_a_lease_lost_twice_cancels_its_turn_once(pool: Pool, database_url: str) -> None:
    r = LeaseRenewer(
        fast_settings(), database_url, worker_id=uuid.uuid4(), hostname="t", queues=["llm"]
    )
    await r.connect()
    try:
        async with transaction(pool) as conn:
            loop = await factories.loop(conn, status="running", lease_in=30)
        turn = FakeTurn()
        task: asyncio.Task[object] = asyncio.create_task(turn())  # type: ignore[arg-type]
        await asyncio.sleep(0)
        stale = r.register_turn(loop.id, uuid.uuid4(), 12.0, 60.0, task)
        # Claimed again under a new token (supersedes the stale registration) ...
        fresh = r.register_turn(loop.id, loop.execution_token, 12.0, 60.0, None)  # type: ignore[arg-type]
        await asyncio.wait_for(turn.unwinding.wait(), 5)
        r.revoke(stale, "stop")  # ... and a stop for the old generation lands too
        await eventually(lambda: asyncio.sleep(0, task.done()), within=5)
        assert turn.cut.is_set()
        assert stale.lost and stale.reason == "token_rotated" and r.lost_count == 1
        assert r.in_flight() == ([fresh], [])
    finally:
        await r.close()

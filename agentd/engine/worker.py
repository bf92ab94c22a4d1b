"""Worker: claims LLM turns and tool calls and runs them through their pipelines.

Guarantee: never more claims in flight than free slots per queue; a claimed turn's lease
is registered with the LeaseRenewer before any work; on shutdown, claiming stops, in-flight
work gets `shutdown_grace` to finish, the rest is cancelled and its leases released (with
fresh jobs) so another worker resumes it at once.
Tolerates: stale and duplicate jobs (the claim drops them), lost leases (the turn's task is
cancelled and writes nothing), database outages (claim loops back off and retry).
Never: holds a pooled connection while a turn waits on the network.
Called by: engine.service.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agentd import logs
from agentd.db.pool import Connection, connection, transaction
from agentd.engine import dispatch, scopes, steering, versions
from agentd.engine.chaining import Chain
from agentd.engine.context import ToolContext, TurnContext
from agentd.engine.history_cache import HistoryCache
from agentd.engine.lease_renewer import Lease
from agentd.engine.runtime import Runtime
from agentd.engine.stacks import StackSource
from agentd.engine.ticks import Signal
from agentd.errors import DatabaseError
from agentd.states import ToolCallOutcome, TurnOutcome
from agentd.store import jobs, loops, mcp, messages, tool_calls
from agentd.store.models import Loop, ToolCall

log = logs.get("agentd.worker")
# A job's lines carry its ids from its scope's context (engine/scopes.py): no per-job bind.
_turn_log = logs.get("agentd.turn")
_tool_log = logs.get("agentd.tool_call")


class Worker:
    def __init__(self, runtime: Runtime, queues: list[str], stacks: StackSource) -> None:
        self.runtime = runtime
        self.stacks = stacks
        self.queues = [q for q in queues if q in ("llm", "tool")]
        s = runtime.settings
        self.limits = {"llm": s.llm_concurrency, "tool": s.tool_concurrency}
        self.busy = {"llm": 0, "tool": 0}
        self.wakes = runtime.wakes.events  # shared with Runtime.wake_local (engine/wakes.py)
        # The queue's last claim found nothing and no wake came since: a freed slot then
        # has nothing to claim, so it does not poll (new work arrives with a wake).
        self.drained = runtime.wakes.drained
        self.tasks: dict[asyncio.Task[None], dict[str, Any]] = {}
        self.turn_done = Signal()
        self.tool_done = Signal()
        self.claimed = Signal()
        self.stop: asyncio.Event | None = None  # run()'s: set, nothing new starts here
        self.context: contextvars.Context | None = None  # run()'s, for chained jobs
        # The transcripts of loops this worker ran, so a chained turn reads only new rows.
        self.history = HistoryCache(max_loops=max(64, 2 * s.llm_concurrency))

    # --- waking and control -------------------------------------------------------------

    def wake(self, queue: str) -> None:
        ev = self.wakes.get(queue)
        if ev is not None:
            self.drained[queue] = False
            ev.set()

    def wake_all(self) -> None:
        for q in self.wakes:
            self.wake(q)

    def on_control(self, payload: str) -> None:
        """Pause/stop/freeze elsewhere: cancel this loop's in-flight work here, now."""
        try:
            data = json.loads(payload)
            loop_id = uuid.UUID(data["loop_id"])
        except (ValueError, KeyError, TypeError):
            return
        # A revoke that names the generation (regenerate) spares a newer turn of the loop
        # this process may already have claimed before the NOTIFY arrived.
        only = data.get("token")
        for task, info in list(self.tasks.items()):
            if only is not None and str(info.get("token")) != str(only):
                continue
            if info.get("loop_id") != loop_id or task.done() or "cancelled_by" in info:
                continue  # a revoke told twice (NOTIFY re-sent) cancels once
            action = str(data.get("action", "control"))
            info["cancelled_by"] = action
            lease: Lease | None = info.get("lease")
            if lease is not None and self.runtime.renewer is not None:
                # Through the renewer: the lease is unregistered and marked lost, so its
                # next tick does not cancel the unwinding turn a second time.
                self.runtime.renewer.revoke(lease, action)
            else:
                task.cancel(f"loop {action}")

    @property
    def in_flight(self) -> int:
        return len(self.tasks)

    # --- chaining (engine/chaining.py) ---------------------------------------------------

    def reserve(self, queue: str, n: int) -> int:
        """Take up to `n` free slots of `queue` for work this worker will lease to itself
        (a finished turn's tool calls), skipping the queue and its claim."""
        if queue not in self.queues or self.stop is None or self.stop.is_set():
            return 0
        k = max(0, min(n, self.limits[queue] - self.busy[queue]))
        self.busy[queue] += k
        return k

    def unreserve(self, queue: str, n: int) -> None:
        if n <= 0:
            return
        full = self.busy[queue] >= self.limits[queue]
        self.busy[queue] -= n
        if full:
            self.wakes[queue].set()

    def _offer(
        self,
        queue: str,
        history_after: Callable[[], int | None] | None = None,
        tools_held: Callable[[], bool] | None = None,
    ) -> Chain | None:
        """The chain a job's finalizer may lease `queue` work to this worker through."""
        if not self.runtime.settings.chaining or queue not in self.queues:
            return None
        chain = Chain(queue=queue, reserve=lambda n: self.reserve(queue, n))
        if history_after is not None:
            chain.history_after = history_after
        if tools_held is not None:
            chain.tools_held = tools_held
        return chain

    def _settle(self, chain: Chain, loop_id: uuid.UUID, *, cancelled: bool) -> None:
        """After a job's stack returned or raised: run what its finalizer leased here in the
        slots it took, give back the rest; what a write that did not return (or a cancelled
        job) may have leased goes back to the queue at once."""
        work = chain.leased
        if work is None or cancelled:
            self.unreserve(chain.queue, chain.taken)
            if chain.tokens and (work is None or work.slots):
                self._hand_back(chain, loop_id)
            return
        extra = work.slots - chain.taken
        if extra > 0:  # a finalizer that leased more than it took: run it all the same
            self.busy[chain.queue] += extra
        else:
            self.unreserve(chain.queue, -extra)
        for claim in work.tools:
            assert claim.tool_call is not None and claim.tool_call.lease_token is not None
            self.run_leased_tool(claim, claim.tool_call.lease_token)
        if work.turn is not None:
            self.run_leased_turn(work.turn, work.prefetch)

    def _hand_back(self, chain: Chain, loop_id: uuid.UUID) -> None:
        tokens = list(chain.tokens)

        async def tools(conn: Connection) -> None:
            await tool_calls.release_own(conn, loop_id=loop_id, tokens=tokens)

        async def turn(conn: Connection) -> None:
            await loops.release_leases(conn, ids=[loop_id], tokens=tokens)
            await jobs.notify(conn, queue="llm")

        if chain.queue == "tool":
            dispatch.hand_back(self.runtime, tools, what="chained tool calls", loop_id=loop_id)
        else:
            dispatch.hand_back(self.runtime, turn, what="chained turn", loop_id=loop_id)

    def run_leased_turn(self, loop: Loop, prefetch: jobs.TurnPrefetch | None) -> None:
        """Run a turn already claimed for this worker (in a slot taken by reserve())."""
        assert loop.execution_token is not None
        self._spawn(
            "llm",
            loop.id,
            self._run_turn(loop, prefetch),
            reserved=True,
            chained=True,
            token=loop.execution_token,
        )

    def run_leased_tool(self, claim: jobs.ToolClaim, lease_token: uuid.UUID) -> None:
        """Run a call already leased to this worker (in a slot taken by reserve())."""
        tc = claim.tool_call
        assert tc is not None and claim.generation is not None
        self._spawn(
            "tool",
            tc.loop_id,
            self._run_tool(tc, lease_token, claim.generation, claim.agent, claim),
            reserved=True,
            chained=True,
            tool_call_id=tc.id,
            token=claim.generation,
        )

    # --- claiming -------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.context = contextvars.copy_context()
        if not self.queues:  # a maintenance-only process: nothing to claim, run until told
            await stop.wait()
            return
        async with asyncio.TaskGroup() as tg:
            for q in self.queues:
                tg.create_task(self._claim_loop(q, stop), name=f"claim-{q}")
        await self.drain()

    async def _wait(self, queue: str, stop: asyncio.Event, at_most: float) -> None:
        ev = self.wakes[queue]
        waiters = {asyncio.ensure_future(ev.wait()), asyncio.ensure_future(stop.wait())}
        try:
            await asyncio.wait(waiters, timeout=at_most, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        ev.clear()

    async def _claim_loop(self, queue: str, stop: asyncio.Event) -> None:
        backoff = 0.1
        poll = self.runtime.settings.poll_interval
        while not stop.is_set():
            if self.busy[queue] >= self.limits[queue]:
                await self._wait(queue, stop, poll)
                continue
            try:
                got = await (self._claim_llm() if queue == "llm" else self._claim_tool())
                backoff = 0.1
            except DatabaseError as exc:
                log.warning("worker.claim_failed", queue=queue, error=str(exc), retry_in=backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if got is None:
                self.drained[queue] = True
                await self._wait(queue, stop, poll)
                self.drained[queue] = False  # woken or polled: look again

    async def _claim_llm(self) -> bool | None:
        rt = self.runtime
        token = uuid.uuid4()
        default = rt.settings.lease_seconds(None)
        async with connection(rt.pool) as conn:
            claim = await jobs.claim_llm(
                conn,
                execution_token=token,
                worker_id=rt.worker_id,
                default_lease=default,
                versions=rt.registry.version_ids(),
            )
        if claim is None:
            return None
        if not claim.taken:  # lost a race for its concurrency key's last slot: claim again
            log.debug("turn.concurrency_key_full", job_id=claim.job_id, loop_id=str(claim.loop_id))
            return True
        if claim.loop is None:
            log.debug("turn.stale_job_dropped", job_id=claim.job_id, loop_id=str(claim.loop_id))
            return True
        self._spawn(
            "llm",
            claim.loop.id,
            self._run_turn(claim.loop, claim.prefetch),
            job_id=claim.job_id,
            token=claim.loop.execution_token,
        )
        return True

    async def _claim_tool(self) -> bool | None:
        rt = self.runtime
        token = uuid.uuid4()
        async with connection(rt.pool) as conn:
            claim = await jobs.claim_tool(
                conn,
                lease_token=token,
                worker_id=rt.worker_id,
                default_lease=rt.tool_lease_seconds(),
                versions=rt.registry.version_ids(),
            )
        if claim is None:
            return None
        if claim.tool_call is None or claim.generation is None:
            log.debug("tool_call.stale_job_dropped", job_id=claim.job_id)
            return True
        tc = claim.tool_call
        self._spawn(
            "tool",
            tc.loop_id,
            self._run_tool(tc, token, claim.generation, claim.agent, claim),
            job_id=claim.job_id,
            tool_call_id=tc.id,
            token=claim.generation,
        )
        return True

    def _spawn(
        self,
        queue: str,
        loop_id: uuid.UUID,
        coro: Coroutine[Any, Any, None],
        *,
        reserved: bool = False,
        chained: bool = False,
        **info: object,
    ) -> None:
        if not reserved:
            self.busy[queue] += 1
        # A chained job is spawned from inside its turn's task: give it the worker's own
        # context, not the turn's (log ids, trace span), like a claimed job has.
        ctx = self.context.copy() if chained and self.context is not None else None
        task = asyncio.get_running_loop().create_task(coro, name=f"{queue}-{loop_id}", context=ctx)
        self.tasks[task] = {"queue": queue, "loop_id": loop_id, **info}
        self.claimed.fire()

        def done(t: asyncio.Task[None]) -> None:
            self.tasks.pop(t, None)
            full = self.busy[queue] >= self.limits[queue]
            self.busy[queue] -= 1
            if full and not self.drained[queue]:
                self.wakes[queue].set()  # the claim loop stopped at its limit: claim again

        task.add_done_callback(done)

    # --- running ----------------------------------------------------------------------------

    async def _version_boundary(self, loop: Loop) -> Loop | None:
        """A turn about to start is a turn boundary: apply the loop's pending upgrade when
        this process has the target version. None: this process cannot run the version
        the turn must run on (a chained turn whose upgrade was asked for meanwhile), and
        the turn went back to the queue for a worker that can."""
        assert loop.execution_token is not None
        target = loop.upgrade_to or loop.agent_version
        if target is not None and not self.runtime.registry.can_run(target):
            lid, token = loop.id, loop.execution_token

            async def back(conn: Connection) -> None:
                await loops.release_leases(conn, ids=[lid], tokens=[token])
                await jobs.notify(conn, queue="llm")

            dispatch.hand_back(self.runtime, back, what="turn of another version", loop_id=lid)
            _turn_log.info("turn.version_unavailable", loop_id=str(lid), version=target)
            return None
        if loop.upgrade_to is None or loop.upgrade_to == loop.agent_version:
            return loop
        async with transaction(self.runtime.pool) as conn:
            done = await versions.apply_upgrade(
                conn, loop_id=loop.id, execution_token=loop.execution_token
            )
        if done is None:  # the fence moved on: the turn's own writes will find it too
            return loop
        _turn_log.info("loop.upgraded", **done)
        return dataclasses.replace(loop, agent_version=loop.upgrade_to, upgrade_to=None)

    async def _run_turn(self, loop: Loop, prefetch: jobs.TurnPrefetch | None = None) -> None:
        rt = self.runtime
        assert loop.execution_token is not None
        token = loop.execution_token
        bound = _turn_log
        # The agent versions this process can run: its claims skip loops of any other
        # (agentd/versions.py), so a worker that lacks a loop's agent never fails it.
        if loop.upgrade_to is not None or not rt.registry.can_run(loop.agent_version):
            boundary = await self._version_boundary(loop)
            if boundary is None:
                return
            if boundary.agent_version != loop.agent_version:
                prefetch = None  # read after the upgrade: its tools are listed again
            loop = boundary
        agent_cls = rt.registry.get(loop.agent) if loop.agent in rt.registry else None
        max_duration = (
            agent_cls.max_duration if agent_cls else None
        ) or rt.settings.default_max_duration
        lease: Lease | None = None
        task = asyncio.current_task()
        if rt.renewer is not None:
            lease = rt.renewer.register_turn(
                loop.id, token, loop.lease_seconds or 660.0, float(max_duration), task
            )
            self.tasks.get(task, {})["lease"] = lease  # type: ignore[arg-type]
        started = time.monotonic()
        if prefetch is not None:
            prefetch = await self._whole_history(loop, prefetch)
        ctx = TurnContext(
            runtime=rt,
            loop=loop,
            execution_token=token,
            prefetch=prefetch,
            chain=self._offer("tool"),
        )
        job_id = self.tasks.get(task, {}).get("job_id")  # type: ignore[arg-type]
        with scopes.turn(rt.telemetry, ctx, worker=str(rt.worker_id), job_id=job_id):
            bound.debug("turn.claimed")
            await self._supervise(
                lambda: self._turn(ctx, agent_cls),
                kind="turn",
                lease=lease,
                bound=bound,
                outcome=lambda o: rt.telemetry.turn_outcome(ctx, TurnOutcome(o)),
                done=self.turn_done,
                done_fields=lambda: {"seconds": round(time.monotonic() - started, 3)},
                chain=ctx.chain,
                loop_id=loop.id,
            )
        if ctx.shared_sessions is not None and ctx.finished:
            # Before the calls it chained run (they are spawned, not yet started): their
            # end may then chain the next turn without reading the tools again.
            self.history.hold_tools(loop.id, token, ctx.tools, ctx.shared_sessions)

    async def _turn(self, ctx: TurnContext, agent_cls: type | None) -> None:
        if ctx.loop.steer_pending and not await self._steer(ctx):
            return
        await self.stacks.llm(agent_cls)(ctx)

    async def _steer(self, ctx: TurnContext) -> bool:
        """Messages sent to the loop that are due at this turn's start join its history
        (engine/steering.py); False: the turn lost its fence, so it writes nothing."""
        rt = self.runtime
        n = await steering.apply_due(
            rt.pool, loop_id=ctx.loop.id, execution_token=ctx.execution_token
        )
        if n is None:
            _turn_log.info("turn.fence_lost", at="steering")
            return False
        if n:
            _turn_log.info("turn.steered", messages=n)
            if ctx.prefetch is not None:  # read before they were applied: read again
                async with connection(rt.pool) as conn:
                    rows = await messages.list_(conn, loop_id=ctx.loop.id)
                    calls = await tool_calls.list_for_loop(conn, loop_id=ctx.loop.id)
                pre = dataclasses.replace(ctx.prefetch, messages=rows, tool_calls=calls, after=None)
                ctx.prefetch = await self._whole_history(ctx.loop, pre)
        return True

    async def _whole_history(self, loop: Loop, pre: jobs.TurnPrefetch) -> jobs.TurnPrefetch:
        """A delta prefetch merged with the transcript held (read in full if it is gone);
        what the turn's prompt is built from is then held for the next chained turn."""
        assert loop.execution_token is not None
        rows, calls = pre.messages, pre.tool_calls
        if pre.tools_omitted:  # the read left them out: this worker said it holds them
            held = self.history.held_tools(loop.id)
            if held is None:  # gone since (evicted): read them
                async with connection(self.runtime.pool) as conn:
                    sessions = await mcp.list_sessions(conn, loop_id=loop.id)
                    tools = await mcp.list_tools(conn, loop_id=loop.id)
            else:
                tools, sessions = held
            pre = dataclasses.replace(
                pre, mcp_tools=tools, mcp_sessions=sessions, tools_omitted=False
            )
        if pre.after is not None:
            merged = self.history.merge(loop.id, pre.after, rows, calls)
            if merged is None:
                async with connection(self.runtime.pool) as conn:
                    rows = await messages.list_(conn, loop_id=loop.id)
                    calls = await tool_calls.list_for_loop(conn, loop_id=loop.id)
            else:
                rows, calls = merged
            pre = dataclasses.replace(pre, messages=rows, tool_calls=calls, after=None)
        self.history.record(loop.id, loop.execution_token, rows, calls)
        return dataclasses.replace(pre, rendered=self.history.rendered(loop.id))

    async def _run_tool(
        self,
        tc: ToolCall,
        lease_token: uuid.UUID,
        generation: uuid.UUID,
        agent: str | None,
        claim: jobs.ToolClaim | None = None,
    ) -> None:
        rt = self.runtime
        bound = _tool_log
        agent_cls = rt.registry.get(agent) if agent and agent in rt.registry else None
        lease: Lease | None = None
        task = asyncio.current_task()
        if rt.renewer is not None:
            lease = rt.renewer.register_tool(tc.id, lease_token, rt.tool_lease_seconds(), task)
            self.tasks.get(task, {})["lease"] = lease  # type: ignore[arg-type]
        ctx = ToolContext(
            runtime=rt,
            tool_call=tc,
            lease_token=lease_token,
            generation=generation,
            chain=self._offer(
                "llm",
                lambda: self.history.after(tc.loop_id, generation),
                lambda: self.history.tools_held(tc.loop_id, generation),
            ),
        )
        if claim is not None and claim.loop is not None:
            ctx.prefetched = (claim.loop, claim.tool)  # AgentInitialization reads nothing
        job_id = self.tasks.get(task, {}).get("job_id")  # type: ignore[arg-type]
        with scopes.tool_call(
            rt.telemetry, ctx, agent=agent, worker=str(rt.worker_id), job_id=job_id
        ):
            bound.debug("tool_call.claimed", tool=tc.name)
            await self._supervise(
                lambda: self.stacks.tool(agent_cls)(ctx),
                kind="tool_call",
                lease=lease,
                bound=bound,
                outcome=lambda o: rt.telemetry.tool_call_outcome(ctx, ToolCallOutcome(o)),
                done=self.tool_done,
                done_fields=lambda: {"held": ctx.held},
                chain=ctx.chain,
                loop_id=tc.loop_id,
            )

    async def _supervise(
        self,
        run: Callable[[], Awaitable[None]],
        *,
        kind: str,
        lease: Lease | None,
        bound: Any,
        outcome: Callable[[TurnOutcome | ToolCallOutcome], None],
        done: Signal,
        done_fields: Callable[[], dict[str, Any]],
        chain: Chain | None,
        loop_id: uuid.UUID,
    ) -> None:
        """Run one job's pipeline. A lost lease or a pause/stop cancels it quietly (it wrote
        nothing); shutdown's cancellation propagates; a crash is logged, never re-raised
        into the worker. Then what its finalizer leased to this worker runs (chaining),
        unless it was cancelled. The lease is always unregistered."""
        task = asyncio.current_task()
        cancelled = False
        try:
            await run()
            bound.debug(f"{kind}.done", **done_fields())
        except asyncio.CancelledError:
            cancelled = True
            info = self.tasks.get(task, {})  # type: ignore[arg-type]
            told = info.get("cancelled_by")  # a pause/stop/regenerate, not a lost lease
            lost = told is None and lease is not None and lease.lost
            why = lease.reason if lease is not None and lost else (told or "shutdown")
            # the same words in both vocabularies; the callers convert
            outcome(TurnOutcome.LEASE_LOST if lost else TurnOutcome.CANCELLED)
            bound.info(f"{kind}.cancelled", reason=why)
            if why == "shutdown":
                raise
        except Exception:
            outcome(TurnOutcome.FAILED)
            bound.exception(f"{kind}.crashed")
        finally:
            if chain is not None:
                self._settle(chain, loop_id, cancelled=cancelled)
            if lease is not None and self.runtime.renewer is not None:
                self.runtime.renewer.unregister(lease)
            done.fire()

    # --- shutdown -----------------------------------------------------------------------------

    async def drain(self) -> None:
        """Phase two of shutdown: wait the grace period, then cancel and hand work back."""
        grace = self.runtime.settings.shutdown_grace
        pending = set(self.tasks)
        if pending:
            log.info("worker.draining", in_flight=len(pending), grace=grace)
            _, pending = await asyncio.wait(pending, timeout=grace)
        if not pending:
            return
        turns: list[tuple[uuid.UUID, uuid.UUID]] = []
        tools: list[tuple[int, uuid.UUID]] = []
        if self.runtime.renewer is not None:
            llm_leases, tool_leases = self.runtime.renewer.in_flight()
            turns = [(x.key, x.token) for x in llm_leases]  # type: ignore[misc]
            tools = [(x.key[1], x.token) for x in tool_leases]  # type: ignore[index]
        for t in pending:
            t.cancel("shutdown")
        await asyncio.wait(pending, timeout=5)
        await self.release(turns, tools)

    async def release(
        self, turns: list[tuple[uuid.UUID, uuid.UUID]], tools: list[tuple[int, uuid.UUID]]
    ) -> None:
        if not turns and not tools:
            return
        try:
            async with connection(self.runtime.pool) as conn, conn.transaction():
                if turns:
                    await loops.release_leases(
                        conn, ids=[t[0] for t in turns], tokens=[t[1] for t in turns]
                    )
                if tools:
                    await tool_calls.release_leases(
                        conn, ids=[t[0] for t in tools], tokens=[t[1] for t in tools]
                    )
                await jobs.notify(conn, queue="llm")
                await jobs.notify(conn, queue="tool")
            log.info("worker.released", turns=len(turns), tool_calls=len(tools))
        except DatabaseError as exc:
            log.warning("worker.release_failed", error=str(exc))

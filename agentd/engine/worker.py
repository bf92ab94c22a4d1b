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
import contextvars
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from agentd import logs
from agentd.engine import claiming, dispatch, draining, scopes, supervising, turn_start
from agentd.engine.chaining import Chain
from agentd.engine.context import ToolContext, TurnContext
from agentd.engine.history_cache import HistoryCache
from agentd.engine.lease_renewer import Lease
from agentd.engine.runtime import Runtime
from agentd.engine.stacks import StackSource
from agentd.engine.ticks import Signal
from agentd.states import JobQueue, ToolCallOutcome, TurnOutcome
from agentd.store import jobs
from agentd.store.models import Loop, ToolCall

log = logs.get("agentd.worker")
# A job's lines carry its ids from its scope's context (engine/scopes.py): no per-job bind.
_turn_log = logs.get("agentd.turn")
_tool_log = logs.get("agentd.tool_call")
_QUEUES = (JobQueue.LLM, JobQueue.TOOL)  # the queues a worker claims (maintenance: the reaper)


class Worker:
    def __init__(self, runtime: Runtime, queues: list[str], stacks: StackSource) -> None:
        self.runtime = runtime
        self.stacks = stacks
        self.queues = [JobQueue(q) for q in queues if q in _QUEUES]
        s = runtime.settings
        # Keyed by JobQueue members; a plain "llm" looks them up too (a StrEnum).
        self.limits: dict[str, int] = {
            JobQueue.LLM: s.llm_concurrency,
            JobQueue.TOOL: s.tool_concurrency,
        }
        self.busy: dict[str, int] = {q: 0 for q in _QUEUES}
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
                dispatch.hand_back_chained(self.runtime, chain.queue, chain.tokens, loop_id)
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

    def run_leased_turn(self, loop: Loop, prefetch: jobs.TurnPrefetch | None) -> None:
        """Run a turn already claimed for this worker (in a slot taken by reserve())."""
        assert loop.execution_token is not None
        self._spawn(
            JobQueue.LLM,
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
            JobQueue.TOOL,
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
                tg.create_task(claiming.claim_loop(self, q, stop), name=f"claim-{q}")
        await self.drain()

    def run_claimed_turn(
        self, loop: Loop, prefetch: jobs.TurnPrefetch | None, *, job_id: int
    ) -> None:
        """Run a turn the claim loop took from the queue (engine/claiming.py)."""
        self._spawn(
            JobQueue.LLM,
            loop.id,
            self._run_turn(loop, prefetch),
            job_id=job_id,
            token=loop.execution_token,
        )

    def run_claimed_tool(
        self, claim: jobs.ToolClaim, lease_token: uuid.UUID, *, job_id: int
    ) -> None:
        """Run a call the claim loop leased from the queue (engine/claiming.py)."""
        tc = claim.tool_call
        assert tc is not None and claim.generation is not None
        self._spawn(
            JobQueue.TOOL,
            tc.loop_id,
            self._run_tool(tc, lease_token, claim.generation, claim.agent, claim),
            job_id=job_id,
            tool_call_id=tc.id,
            token=claim.generation,
        )

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

    async def _run_turn(self, loop: Loop, prefetch: jobs.TurnPrefetch | None = None) -> None:
        rt = self.runtime
        assert loop.execution_token is not None
        token = loop.execution_token
        bound = _turn_log
        # The agent versions this process can run: its claims skip loops of any other
        # (agentd/versions.py), so a worker that lacks a loop's agent never fails it.
        if loop.upgrade_to is not None or not rt.registry.can_run(loop.agent_version):
            boundary = await turn_start.version_boundary(rt, loop)
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
            prefetch = await turn_start.whole_history(rt, self.history, loop, prefetch)
        ctx = TurnContext(
            runtime=rt,
            loop=loop,
            execution_token=token,
            prefetch=prefetch,
            chain=self._offer(JobQueue.TOOL),
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
        if ctx.loop.steer_pending and not await turn_start.steer(self.runtime, self.history, ctx):
            return
        await self.stacks.llm(agent_cls)(ctx)

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
                JobQueue.LLM,
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
        chain: Chain | None,
        loop_id: uuid.UUID,
        **how: Any,
    ) -> None:
        """Run one job's pipeline under engine/supervising.py's rules."""
        info = self.tasks.get(asyncio.current_task(), {})  # type: ignore[arg-type]
        settle = None
        if chain is not None:
            settle = lambda cancelled: self._settle(chain, loop_id, cancelled=cancelled)  # noqa: E731
        await supervising.supervise(
            run, info=info, renewer=self.runtime.renewer, settle=settle, **how
        )

    # --- shutdown -----------------------------------------------------------------------------

    async def drain(self) -> None:
        """Phase two of shutdown: wait the grace period, then cancel and hand work back."""
        await draining.drain(self.runtime, set(self.tasks))

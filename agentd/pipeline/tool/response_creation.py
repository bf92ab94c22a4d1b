"""ResponseCreation: the tool message, and the turn's continuation.

Position: last. In ONE round trip and one commit (store/sql/tool_calls.sql
`tool_call_finish`, the function of sql/functions/tool_call_finish.sql; shared with the
ends of other tool calls that arrive while one is being written, engine/finish_batch.py),
under the loop's row lock and fenced by the generation and the call's lease token: records
the result ToolExecution handed over (ctx.checkpoint, when it folded its checkpoint into this
statement), inserts the `tool` message, marks the call responded, then sequential:
enqueues the next unresolved call in model order; and in both modes the completion gate —
the job that records the last result enqueues the next LLM turn, so N parallel calls queue
it exactly once (the siblings are read after the lock is taken, never from an older
snapshot). Chaining (engine/chaining.py): with an LLM slot lent, that job is instead the
next turn claimed for this worker, returned in ctx.chain.leased for the worker to run once
the stack returns.
Finalizer: yes — replacing this forfeits the fences.
"""

from __future__ import annotations

import uuid

from agentd.engine import dispatch
from agentd.engine.chaining import Chain, LeasedWork
from agentd.engine.context import ToolContext
from agentd.errors import FenceLost
from agentd.pipeline.builder import Handler
from agentd.states import JobQueue, ToolCallOutcome, TransitionReason
from agentd.store import tool_calls
from agentd.store.models import NewEvent


class ResponseCreation:
    def __init__(self, app: Handler[ToolContext]) -> None:
        self.app = app

    async def __call__(self, ctx: ToolContext) -> None:
        tc = ctx.tool_call
        runtime = ctx.runtime
        agent = ctx.agent
        assert agent is not None
        woke: list[str] = []
        cp = ctx.checkpoint
        # Chaining: with an LLM slot lent by the worker (ctx.chain), the result that resolves
        # the turn's last call claims the loop's next turn for this worker in the same
        # statement; the worker runs it, from ctx.chain.leased, once the stack has returned.
        chain = ctx.chain
        slot = chain.take(1) if chain is not None else 0
        new_token = uuid.uuid4()
        if chain is not None and slot:
            chain.tokens = [new_token]  # handed back if the write raises (it may have committed)
        done = await self._finish(ctx, cp, new_token, chain if slot else None)
        if done is None:
            if chain is not None:
                chain.leased = LeasedWork()  # nothing was written
            raise FenceLost()  # the generation moved on, the lease was lost, or answered
        if runtime.renewer is not None:  # committed: the lease ended with it
            runtime.renewer.settle_tool(tc.id, ctx.lease_token)
        if chain is not None:
            chain.leased = LeasedWork(turn=done.chained, prefetch=done.prefetch)
        if cp is not None:  # the folded checkpoint committed with the response
            ctx.checkpoint = None
            ctx.tool_call = tc.replace(executed_at=done.executed_at)
            runtime.telemetry.tool_call_outcome(
                ctx, ToolCallOutcome.COMPLETED if cp.is_success else ToolCallOutcome.ERROR
            )
        if done.tool_jobs:
            woke.append(JobQueue.TOOL)
        if done.llm_jobs:
            woke.append(JobQueue.LLM)
        ctx.events = []
        ctx.events_flushed = True
        dispatch.wake(runtime, *woke)
        await self.app(ctx)

    async def _finish(
        self,
        ctx: ToolContext,
        cp: tool_calls.Checkpoint | None,
        new_token: uuid.UUID,
        chain: Chain | None,
    ) -> tool_calls.Finished | None:
        tc = ctx.tool_call
        runtime = ctx.runtime
        agent = ctx.agent
        assert agent is not None
        document = tool_calls.finish_document(
            tool_call_id=tc.id,
            loop_id=tc.loop_id,
            lease_token=ctx.lease_token,
            generation=ctx.generation,
            checkpoint=cp,
            sequential=ctx.sequential,
            new_token=new_token,
            status_reason=TransitionReason.TOOLS_RESOLVED,
            llm_lease_seconds=runtime.settings.lease_seconds(agent.read_timeout),
            tool_lease_seconds=runtime.tool_lease_seconds(),
            notify_llm=JobQueue.LLM not in runtime.consumes,
            notify_tool=JobQueue.TOOL not in runtime.consumes,
            call_events=[
                *ctx.events,
                NewEvent(
                    name="tool_call.completed",
                    loop_id=tc.loop_id,
                    tool_call_id=tc.id,
                    reason="replayed" if ctx.replayed else None,
                    log=f"is_success={tc.is_success}",
                ),
            ],
            attach=[False] * len(ctx.events) + [True],
            chain_worker=runtime.worker_id if chain is not None else None,
            chain_after=chain.history_after() if chain is not None else None,
            chain_tools=chain is None or not chain.tools_held(),
        )
        # Group commit (engine/finish_batch.py): alone when nothing else is being written,
        # else with the ends that arrive meanwhile, in one statement and one commit.
        return tool_calls.finished(await runtime.finishes.submit(document))

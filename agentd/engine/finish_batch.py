"""Group commit for the ends of tool calls: the ends that arrive while one is being written
go together in the next statement.

A turn's parallel tool calls, and the calls of other loops, tend to end close together;
each end is one statement and one commit (store `tool_call_finish`), and the siblings of a
turn queue on their loop's row lock. Here a tool call's end is handed over and awaited:
with nothing in flight it is written at once, alone; whatever arrives meanwhile is written
next, together (`tool_call_finish_many`: one statement, one commit, the loops locked in
loop-id order). No end waits for a timer, only for the statement before it.

Guarantee: every document is written, or its caller gets the error, exactly as if it had
been written alone: when the shared statement fails (nothing of it was written), each
document is retried alone, so one document's error is only its own. A caller that is
cancelled while it waits does not unwrite its end: it may commit, as a cancelled single
statement may (ResponseCreation hands back what a committed end may have chained).
Called by: pipeline/tool/response_creation.py.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from agentd import logs
from agentd.db.pool import Pool, Record, connection
from agentd.errors import DatabaseError
from agentd.store import tool_calls

log = logs.get("agentd.finish_batch")

#: At most this many ends in one statement (the rest go in the next one).
MAX_BATCH = 64


class FinishBatch:
    """One per process (Runtime.finishes)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._pending: list[tuple[dict[str, Any], asyncio.Future[Record | None]]] = []
        self._writer: asyncio.Task[None] | None = None
        #: statements written and ends in them, for the tests and a debug line
        self.statements = 0
        self.ends = 0

    async def submit(self, document: dict[str, Any]) -> Record | None:
        """Write one `tool_call_finish` document; its row (None: no row)."""
        future: asyncio.Future[Record | None] = asyncio.get_running_loop().create_future()
        self._pending.append((document, future))
        if self._writer is None:
            # Its own context: the batch is no one job's (log ids, trace span).
            self._writer = asyncio.get_running_loop().create_task(
                self._write(), name="finish-batch", context=contextvars.Context()
            )
        return await future

    async def _write(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                self.statements += 1
                self.ends += len(batch)
                if len(batch) == 1:
                    await self._alone(*batch[0])
                    continue
                try:
                    async with connection(self.pool) as conn:
                        rows = await tool_calls.finish_many(conn, [d for d, _ in batch])
                except DatabaseError as exc:
                    # Nothing of it was written: each end alone, so an error is only its own.
                    log.info("finish_batch.retry_alone", ends=len(batch), error=str(exc))
                    self.statements += len(batch)
                    for document, future in batch:
                        await self._alone(document, future)
                    continue
                except BaseException as exc:
                    for _, future in batch:
                        _settle(future, exc=exc)
                    raise
                for (_, future), row in zip(batch, rows, strict=True):
                    _settle(future, row=row)
        finally:
            self._writer = None
            for _, future in self._pending:  # only if the writer itself was cancelled
                _settle(future, exc=asyncio.CancelledError())
            self._pending = []

    async def _alone(self, document: dict[str, Any], future: asyncio.Future[Record | None]) -> None:
        try:
            async with connection(self.pool) as conn:
                row = await tool_calls.finish_row(conn, document)
        except BaseException as exc:
            _settle(future, exc=exc)
            if not isinstance(exc, Exception):  # the writer's own cancellation
                raise
            return
        _settle(future, row=row)


def _settle(
    future: asyncio.Future[Record | None],
    *,
    row: Record | None = None,
    exc: BaseException | None = None,
) -> None:
    if future.done():  # its caller was cancelled meanwhile
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(row)

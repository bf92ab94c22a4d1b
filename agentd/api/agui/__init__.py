"""GET /v1/loops/{id}/stream?protocol=ag-ui: a loop's live stream as AG-UI events.

The same live feed as the agentd stream (api/stream_hub.py: one shared LISTEN, per-loop
queues), mapped to the AG-UI protocol (https://docs.ag-ui.com, version AGUI_VERSION) so
an AG-UI front end (CopilotKit, ...) renders a loop as it runs. The JSON is written here,
camelCase as the protocol specifies; tests validate every event with the `ag-ui-protocol`
package's models, which the runtime does not need.

One connection is one AG-UI run of the thread `threadId` = the loop id:

- RUN_STARTED, MESSAGES_SNAPSHOT (the visible transcript), STATE_SNAPSHOT (loop state);
- streamed text: TEXT_MESSAGE_START / CONTENT (the live deltas) / END (at commit, with
  whatever the deltas did not carry), then the message's reasoning as REASONING_* and its
  tool calls as TOOL_CALL_START / ARGS / END; a tool result: TOOL_CALL_RESULT;
  a user message added meanwhile: a TEXT_MESSAGE_* of role user;
- status changes and approvals: CUSTOM `agentd.status` / `agentd.approval`;
- at rest: RUN_FINISHED (completed: success; paused: an interrupt naming the reason;
  stopped: cancelled) or RUN_ERROR (failed), after a STATE_SNAPSHOT if the state changed.

Message ids are agentd message ids, tool call ids agentd tool call ids (as in the REST
API), both as strings.

Event ids (`Last-Event-ID`): `<A>.<N>.<k>`, where A anchors the run (runId = `<loop>:<A>`),
N is the highest committed message id sent, k a counter; `.<M>.<L>` is appended while text
message M is open with L characters sent. The run's last event is `<A>.<N>.end`. Resuming
continues the run without a second RUN_STARTED: messages after N are sent (tool results
of the newest turn may come twice, as on the agentd stream), an open message gets the rest
of its text at commit. Resuming after `.end` with nothing new answers 204 (an EventSource
stops reconnecting); if the loop moved on, a new run starts (with a fresh snapshot).

Modules: `events` (the event shapes and ids), `frames` (one run's frames, no I/O), `live`
(the connection: the loop's feed as frames), `run_input` (POST of a `RunAgentInput`).
"""

from __future__ import annotations

from agentd.api.agui.events import AGUI_VERSION, Resume, parse_last_event_id
from agentd.api.agui.live import AguiStream, stream
from agentd.api.agui.run_input import RunInput, run

__all__ = [
    "AGUI_VERSION",
    "AguiStream",
    "Resume",
    "RunInput",
    "parse_last_event_id",
    "run",
    "stream",
]

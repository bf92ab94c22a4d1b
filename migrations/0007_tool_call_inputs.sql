-- Waiting on the world, on the tool_calls table (one hot table per migration).
-- Expand-only: older code never names these columns and reads rows by name; no index, no
-- CHECK (nothing to scan or build under the ACCESS EXCLUSIVE lock).
--   input_status      'pending' while a 2026-07-28 server's InputRequiredResult waits for a
--                     person, 'answered' once the answer is recorded (until the retry)
--   input_request     the server's pending request: {"inputRequests": {...}, "requestState"}
--   input_response    the answer the retry carries: {"inputResponses": {...}, "requestState"}
--   input_rounds      how many times the server asked (multi-round elicitation)
--   input_answered_at / input_answered_by   who answered the last round, and when
--   task_id           an MCP task the server runs the call as; the engine polls it
--   task_state        the task's last `tasks/get` snapshot (status, pollInterval, ...)

ALTER TABLE tool_calls
    ADD COLUMN input_status text,
    ADD COLUMN input_request jsonb,
    ADD COLUMN input_response jsonb,
    ADD COLUMN input_rounds integer NOT NULL DEFAULT 0,
    ADD COLUMN input_answered_at timestamptz,
    ADD COLUMN input_answered_by text,
    ADD COLUMN task_id text,
    ADD COLUMN task_state jsonb;

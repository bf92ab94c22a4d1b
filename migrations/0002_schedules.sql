-- Scheduled loops: start a loop from a cron expression or at a time, once per tick
-- across the fleet. Expand-only: version 1 code ignores the new table and column.

CREATE TABLE schedules (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             text NOT NULL UNIQUE,
    agent            text NOT NULL,
    message          text NOT NULL,
    subject          text,
    state            jsonb NOT NULL DEFAULT '{}',
    cron             text,
    timezone         text NOT NULL DEFAULT 'UTC',
    next_run_at      timestamptz,
    overlap          text NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip', 'queue', 'allow')),
    enabled          boolean NOT NULL DEFAULT true,
    source           text NOT NULL DEFAULT 'api' CHECK (source IN ('api', 'config')),
    pending_runs     integer NOT NULL DEFAULT 0,
    runs             bigint NOT NULL DEFAULT 0,
    skipped_runs     bigint NOT NULL DEFAULT 0,
    last_run_at      timestamptz,
    last_loop_id     uuid,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled;
CREATE INDEX schedules_pending ON schedules (id) WHERE pending_runs > 0;

ALTER TABLE loops ADD COLUMN schedule_id bigint REFERENCES schedules(id) ON DELETE SET NULL;
CREATE INDEX loops_schedule_active ON loops (schedule_id)
    WHERE schedule_id IS NOT NULL AND status IN ('queued', 'running', 'waiting');

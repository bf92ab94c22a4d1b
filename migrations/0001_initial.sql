-- agentd schema, version 1.
-- Lease columns (lease_expires_at, leased_until) appear in no index and no partial-index
-- predicate, so heartbeats are HOT updates; fillfactor leaves room for them.

CREATE TABLE loops (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    agent            text NOT NULL,
    subject          text,
    title            text,
    status           text NOT NULL DEFAULT 'init'
                     CHECK (status IN ('init','queued','running','waiting','completed',
                                       'failed','paused','stopped')),
    status_reason    text,
    state            jsonb NOT NULL DEFAULT '{}',
    execution_token  uuid,
    lease_expires_at timestamptz,
    lease_seconds    double precision,
    worker_id        uuid,
    turn_started_at  timestamptz,
    step_count       integer NOT NULL DEFAULT 0,
    error_message    text,
    frozen           boolean NOT NULL DEFAULT false,
    observed         boolean NOT NULL DEFAULT false,
    tokens_prompt    bigint NOT NULL DEFAULT 0,
    tokens_completion bigint NOT NULL DEFAULT 0,
    tokens_cached    bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 80);

CREATE INDEX loops_created ON loops (created_at DESC, id DESC);
CREATE INDEX loops_status_created ON loops (status, created_at DESC, id DESC);
CREATE INDEX loops_agent_created ON loops (agent, created_at DESC, id DESC);
CREATE INDEX loops_running ON loops (id) WHERE status = 'running';
CREATE INDEX loops_queued ON loops (id) WHERE status = 'queued';

CREATE TABLE messages (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    loop_id          uuid NOT NULL REFERENCES loops(id) ON DELETE CASCADE,
    role             text NOT NULL CHECK (role IN ('system','user','assistant','tool')),
    content          text,
    reasoning        text,
    hidden           boolean NOT NULL DEFAULT false,
    status           text NOT NULL DEFAULT 'completed'
                     CHECK (status IN ('processing','completed','failed')),
    step             integer,
    execution_token  uuid,
    tool_call_id     bigint,
    metadata         jsonb NOT NULL DEFAULT '{}',
    tokens_prompt    integer,
    tokens_completion integer,
    tokens_cached    integer,
    ttft             double precision,
    duration         double precision,
    finish_reason    text,
    error_message    text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX messages_loop ON messages (loop_id, id);
-- Invariant 3: at most one canonical assistant message per turn, one result per tool call.
CREATE UNIQUE INDEX messages_one_assistant_per_step
    ON messages (loop_id, step) WHERE role = 'assistant' AND NOT hidden;
CREATE UNIQUE INDEX messages_one_result_per_tool_call
    ON messages (tool_call_id) WHERE role = 'tool';
CREATE INDEX messages_processing ON messages (loop_id) WHERE status = 'processing';

CREATE TABLE tool_calls (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    loop_id          uuid NOT NULL REFERENCES loops(id) ON DELETE CASCADE,
    message_id       bigint NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position         integer NOT NULL,
    provider_call_id text NOT NULL,
    name             text NOT NULL,
    arguments        jsonb,
    arguments_raw    text,
    metadata         jsonb NOT NULL DEFAULT '{}',
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending','waiting','running','completed','failed',
                                       'cancelled')),
    result           text,
    structured_result jsonb,
    is_success       boolean,
    error_message    text,
    executed_at      timestamptz,
    lease_token      uuid,
    leased_until     timestamptz,
    lease_worker_id  uuid,
    attempts         integer NOT NULL DEFAULT 0,
    approval_required boolean NOT NULL DEFAULT false,
    approval_status  text CHECK (approval_status IN ('pending','approved','denied','expired')),
    approval_deadline timestamptz,
    decided_at       timestamptz,
    decided_by       text,
    decision_reason  text,
    response_message_id bigint,
    duration         double precision,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (message_id, position)
) WITH (fillfactor = 80);

CREATE INDEX tool_calls_loop ON tool_calls (loop_id, message_id, position);
CREATE INDEX tool_calls_unresolved ON tool_calls (id) WHERE response_message_id IS NULL;
CREATE INDEX tool_calls_awaiting ON tool_calls (loop_id) WHERE approval_status = 'pending';

CREATE TABLE jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text NOT NULL CHECK (queue IN ('llm','tool','maintenance')),
    kind             text NOT NULL,
    loop_id          uuid REFERENCES loops(id) ON DELETE CASCADE,
    tool_call_id     bigint REFERENCES tool_calls(id) ON DELETE CASCADE,
    generation       uuid,
    lease_seconds    double precision,
    run_at           timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX jobs_ready ON jobs (queue, run_at, id);
CREATE INDEX jobs_loop ON jobs (loop_id);
CREATE INDEX jobs_tool_call ON jobs (tool_call_id);

CREATE TABLE events (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    loop_id          uuid REFERENCES loops(id) ON DELETE CASCADE,
    message_id       bigint,
    tool_call_id     bigint,
    inbound_session_id bigint,
    name             text NOT NULL,
    reason           text,
    http_method      text,
    url              text,
    status           integer,
    request_data     jsonb,
    response_data    jsonb,
    headers          jsonb,
    duration         double precision,
    log              text,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX events_loop ON events (loop_id, id);
CREATE INDEX events_created ON events (created_at, id);
CREATE INDEX events_inbound ON events (inbound_session_id) WHERE inbound_session_id IS NOT NULL;

CREATE TABLE mcp_sessions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    loop_id          uuid NOT NULL REFERENCES loops(id) ON DELETE CASCADE,
    mcp_name         text NOT NULL,
    session_id       text,
    transport_kind   text NOT NULL DEFAULT 'http'
                     CHECK (transport_kind IN ('http','local','stdio','custom')),
    metadata         jsonb NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (loop_id, mcp_name)
);

CREATE TABLE mcp_tools (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    mcp_session_id   bigint NOT NULL REFERENCES mcp_sessions(id) ON DELETE CASCADE,
    loop_id          uuid NOT NULL REFERENCES loops(id) ON DELETE CASCADE,
    name             text NOT NULL,
    remote_name      text NOT NULL,
    description      text,
    input_schema     jsonb NOT NULL DEFAULT '{}',
    requires_approval boolean NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (loop_id, name)
);

CREATE TABLE mcp_inbound_sessions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    server_name      text NOT NULL,
    session_id       text NOT NULL UNIQUE,
    principal        text,
    protocol_version text,
    last_used_at     timestamptz NOT NULL DEFAULT now(),
    terminated_at    timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX mcp_inbound_sessions_created ON mcp_inbound_sessions (created_at, id);

CREATE TABLE workers (
    id               uuid PRIMARY KEY,
    hostname         text NOT NULL,
    pid              integer NOT NULL,
    queues           text[] NOT NULL,
    backend_pid      integer,
    backend_start    timestamptz,
    version          text,
    started_at       timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    stopping         boolean NOT NULL DEFAULT false
) WITH (fillfactor = 70);

CREATE TABLE maintenance (
    name             text PRIMARY KEY,
    last_run_at      timestamptz,
    last_report      jsonb NOT NULL DEFAULT '{}'
);

INSERT INTO maintenance (name) VALUES ('reaper'), ('janitor');

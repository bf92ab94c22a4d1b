-- agentd's schema as of 0.1.0: tables, constraints and indexes. The pre-release history
-- (0001_initial … 0024_chained_turn_tools, and the reasons behind each change) is in git:
-- `git log -- migrations/`. Functions and their triggers are not here: each has one home
-- in agentd/store/sql/functions/, which `agentd migrate` applies after the migrations
-- (agentd/db/migrate.py).
--
-- Hot tables (loops, tool_calls, concurrency_keys, provider_state) keep a fillfactor below
-- 100 so lease renewals and status moves stay HOT updates; no index may name a lease
-- column for the same reason (tests/migrations/test_migrations.py).

CREATE TABLE admin_session_revocations (
    session_id text NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    revoked_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT admin_session_revocations_pkey PRIMARY KEY (session_id)
);
CREATE INDEX admin_session_revocations_expires_at ON admin_session_revocations (expires_at);

CREATE TABLE concurrency_keys (
    key text NOT NULL,
    running integer DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT concurrency_keys_running_check CHECK ((running >= 0)),
    CONSTRAINT concurrency_keys_pkey PRIMARY KEY (key)
) WITH (fillfactor='70');

CREATE TABLE events (
    id bigint GENERATED ALWAYS AS IDENTITY,
    loop_id uuid,
    message_id bigint,
    tool_call_id bigint,
    inbound_session_id bigint,
    name text NOT NULL,
    reason text,
    http_method text,
    url text,
    status integer,
    request_data jsonb,
    response_data jsonb,
    headers jsonb,
    duration double precision,
    log text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (id)
);
CREATE INDEX events_created ON events (created_at, id);
CREATE INDEX events_inbound ON events (inbound_session_id) WHERE (inbound_session_id IS NOT NULL);
CREATE INDEX events_loop ON events (loop_id, id);
CREATE INDEX events_wire_created ON events (created_at, id) WHERE ((name = 'llm.request'::text) OR (name ~~ 'mcp.%'::text));

CREATE TABLE jobs (
    id bigint GENERATED ALWAYS AS IDENTITY,
    queue text NOT NULL,
    kind text NOT NULL,
    loop_id uuid,
    tool_call_id bigint,
    generation uuid,
    lease_seconds double precision,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT jobs_queue_check CHECK ((queue = ANY (ARRAY['llm'::text, 'tool'::text, 'maintenance'::text]))),
    CONSTRAINT jobs_pkey PRIMARY KEY (id)
);
CREATE INDEX jobs_loop ON jobs (loop_id);
CREATE INDEX jobs_ready ON jobs (queue, run_at, id);
CREATE INDEX jobs_tool_call ON jobs (tool_call_id);

CREATE TABLE loop_idempotency_keys (
    key text NOT NULL,
    request_hash bytea NOT NULL,
    loop_id uuid NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT loop_idempotency_keys_pkey PRIMARY KEY (key)
);
CREATE INDEX loop_idempotency_keys_created ON loop_idempotency_keys (created_at);
CREATE INDEX loop_idempotency_keys_loop ON loop_idempotency_keys (loop_id);

CREATE TABLE loops (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    agent text NOT NULL,
    subject text,
    title text,
    status text DEFAULT 'init'::text NOT NULL,
    status_reason text,
    state jsonb DEFAULT '{}'::jsonb NOT NULL,
    execution_token uuid,
    lease_expires_at timestamp with time zone,
    lease_seconds double precision,
    worker_id uuid,
    turn_started_at timestamp with time zone,
    step_count integer DEFAULT 0 NOT NULL,
    error_message text,
    frozen boolean DEFAULT false NOT NULL,
    observed boolean DEFAULT false NOT NULL,
    tokens_prompt bigint DEFAULT 0 NOT NULL,
    tokens_completion bigint DEFAULT 0 NOT NULL,
    tokens_cached bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    schedule_id bigint,
    tokens_estimated boolean DEFAULT false NOT NULL,
    forked_from_loop_id uuid,
    forked_from_message_id bigint,
    concurrency_key text,
    concurrency_limit integer,
    concurrency_held boolean DEFAULT false NOT NULL,
    cost numeric(20,10),
    cost_unpriced_turns integer DEFAULT 0 NOT NULL,
    tokens_reasoning bigint DEFAULT 0 NOT NULL,
    ttft_total double precision DEFAULT 0 NOT NULL,
    ttft_turns integer DEFAULT 0 NOT NULL,
    generation_seconds double precision DEFAULT 0 NOT NULL,
    generation_tokens bigint DEFAULT 0 NOT NULL,
    state_version bigint DEFAULT 1 NOT NULL,
    CONSTRAINT loops_concurrency_limit_check CHECK ((concurrency_limit >= 1)),
    CONSTRAINT loops_status_check CHECK ((status = ANY (ARRAY['init'::text, 'queued'::text, 'running'::text, 'waiting'::text, 'completed'::text, 'failed'::text, 'paused'::text, 'stopped'::text]))),
    CONSTRAINT loops_pkey PRIMARY KEY (id)
) WITH (fillfactor='80');
CREATE INDEX loops_agent_created ON loops (agent, created_at DESC, id DESC);
CREATE INDEX loops_created ON loops (created_at DESC, id DESC);
CREATE INDEX loops_queued ON loops (id) WHERE (status = 'queued'::text);
CREATE INDEX loops_running ON loops (id) WHERE (status = 'running'::text);
CREATE INDEX loops_schedule_active ON loops (schedule_id) WHERE ((schedule_id IS NOT NULL) AND (status = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text])));
CREATE INDEX loops_status_created ON loops (status, created_at DESC, id DESC);

CREATE TABLE maintenance (
    name text NOT NULL,
    last_run_at timestamp with time zone,
    last_report jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT maintenance_pkey PRIMARY KEY (name)
);

CREATE TABLE mcp_inbound_sessions (
    id bigint GENERATED ALWAYS AS IDENTITY,
    server_name text NOT NULL,
    session_id text NOT NULL,
    principal text,
    protocol_version text,
    last_used_at timestamp with time zone DEFAULT now() NOT NULL,
    terminated_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT mcp_inbound_sessions_pkey PRIMARY KEY (id),
    CONSTRAINT mcp_inbound_sessions_session_id_key UNIQUE (session_id)
);
CREATE INDEX mcp_inbound_sessions_created ON mcp_inbound_sessions (created_at, id);

CREATE TABLE mcp_sessions (
    id bigint GENERATED ALWAYS AS IDENTITY,
    loop_id uuid NOT NULL,
    mcp_name text NOT NULL,
    session_id text,
    transport_kind text DEFAULT 'http'::text NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT mcp_sessions_transport_kind_check CHECK ((transport_kind = ANY (ARRAY['http'::text, 'local'::text, 'stdio'::text, 'custom'::text]))),
    CONSTRAINT mcp_sessions_loop_id_mcp_name_key UNIQUE (loop_id, mcp_name),
    CONSTRAINT mcp_sessions_pkey PRIMARY KEY (id)
);

CREATE TABLE mcp_tools (
    id bigint GENERATED ALWAYS AS IDENTITY,
    mcp_session_id bigint NOT NULL,
    loop_id uuid NOT NULL,
    name text NOT NULL,
    remote_name text NOT NULL,
    description text,
    input_schema jsonb DEFAULT '{}'::jsonb NOT NULL,
    requires_approval boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT mcp_tools_loop_id_name_key UNIQUE (loop_id, name),
    CONSTRAINT mcp_tools_pkey PRIMARY KEY (id)
);

CREATE TABLE messages (
    id bigint GENERATED ALWAYS AS IDENTITY,
    loop_id uuid NOT NULL,
    role text NOT NULL,
    content text,
    reasoning text,
    hidden boolean DEFAULT false NOT NULL,
    status text DEFAULT 'completed'::text NOT NULL,
    step integer,
    execution_token uuid,
    tool_call_id bigint,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    tokens_prompt integer,
    tokens_completion integer,
    tokens_cached integer,
    ttft double precision,
    duration double precision,
    finish_reason text,
    error_message text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    tokens_estimated boolean DEFAULT false NOT NULL,
    summary_through bigint,
    superseded_at timestamp with time zone,
    forked_from_message_id bigint,
    CONSTRAINT messages_role_check CHECK ((role = ANY (ARRAY['system'::text, 'user'::text, 'assistant'::text, 'tool'::text]))),
    CONSTRAINT messages_status_check CHECK ((status = ANY (ARRAY['processing'::text, 'completed'::text, 'failed'::text]))),
    CONSTRAINT messages_pkey PRIMARY KEY (id)
);
CREATE INDEX messages_loop ON messages (loop_id, id);
CREATE UNIQUE INDEX messages_one_assistant_per_step ON messages (loop_id, step) WHERE ((role = 'assistant'::text) AND (NOT hidden));
CREATE UNIQUE INDEX messages_one_result_per_tool_call ON messages (tool_call_id) WHERE (role = 'tool'::text);
CREATE INDEX messages_processing ON messages (loop_id) WHERE (status = 'processing'::text);

CREATE TABLE provider_requests (
    id bigint GENERATED ALWAYS AS IDENTITY,
    provider_id text NOT NULL,
    loop_id uuid NOT NULL,
    execution_token uuid NOT NULL,
    tokens integer DEFAULT 0 NOT NULL,
    estimated boolean DEFAULT true NOT NULL,
    settled boolean DEFAULT false NOT NULL,
    admitted_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT provider_requests_pkey PRIMARY KEY (id)
);
CREATE INDEX provider_requests_unsettled ON provider_requests (provider_id) WHERE (NOT settled);
CREATE INDEX provider_requests_window ON provider_requests (provider_id, admitted_at, id);

CREATE TABLE provider_state (
    id text NOT NULL,
    base_url text NOT NULL,
    model text NOT NULL,
    key_fingerprint text NOT NULL,
    blocked_until timestamp with time zone,
    last_status integer,
    last_throttled_at timestamp with time zone,
    max_concurrency integer,
    rpm integer,
    tpm integer,
    throttled bigint DEFAULT 0 NOT NULL,
    admitted bigint DEFAULT 0 NOT NULL,
    deferred bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT provider_state_pkey PRIMARY KEY (id)
) WITH (fillfactor='70');

CREATE TABLE schedules (
    id bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL,
    agent text NOT NULL,
    message text NOT NULL,
    subject text,
    state jsonb DEFAULT '{}'::jsonb NOT NULL,
    cron text,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    next_run_at timestamp with time zone,
    overlap text DEFAULT 'skip'::text NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    source text DEFAULT 'api'::text NOT NULL,
    pending_runs integer DEFAULT 0 NOT NULL,
    runs bigint DEFAULT 0 NOT NULL,
    skipped_runs bigint DEFAULT 0 NOT NULL,
    last_run_at timestamp with time zone,
    last_loop_id uuid,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_overlap_check CHECK ((overlap = ANY (ARRAY['skip'::text, 'queue'::text, 'allow'::text]))),
    CONSTRAINT schedules_source_check CHECK ((source = ANY (ARRAY['api'::text, 'config'::text]))),
    CONSTRAINT schedules_name_key UNIQUE (name),
    CONSTRAINT schedules_pkey PRIMARY KEY (id)
);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled;
CREATE INDEX schedules_pending ON schedules (id) WHERE (pending_runs > 0);

CREATE TABLE tool_calls (
    id bigint GENERATED ALWAYS AS IDENTITY,
    loop_id uuid NOT NULL,
    message_id bigint NOT NULL,
    "position" integer NOT NULL,
    provider_call_id text NOT NULL,
    name text NOT NULL,
    arguments jsonb,
    arguments_raw text,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    result text,
    structured_result jsonb,
    is_success boolean,
    error_message text,
    executed_at timestamp with time zone,
    lease_token uuid,
    leased_until timestamp with time zone,
    lease_worker_id uuid,
    attempts integer DEFAULT 0 NOT NULL,
    approval_required boolean DEFAULT false NOT NULL,
    approval_status text,
    approval_deadline timestamp with time zone,
    decided_at timestamp with time zone,
    decided_by text,
    decision_reason text,
    response_message_id bigint,
    duration double precision,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    input_status text,
    input_request jsonb,
    input_response jsonb,
    input_rounds integer DEFAULT 0 NOT NULL,
    input_answered_at timestamp with time zone,
    input_answered_by text,
    task_id text,
    task_state jsonb,
    requested_arguments jsonb,
    approved_arguments jsonb,
    CONSTRAINT tool_calls_approval_status_check CHECK ((approval_status = ANY (ARRAY['pending'::text, 'approved'::text, 'denied'::text, 'expired'::text]))),
    CONSTRAINT tool_calls_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'waiting'::text, 'running'::text, 'completed'::text, 'failed'::text, 'cancelled'::text]))),
    CONSTRAINT tool_calls_message_id_position_key UNIQUE (message_id, "position"),
    CONSTRAINT tool_calls_pkey PRIMARY KEY (id)
) WITH (fillfactor='80');
CREATE INDEX tool_calls_awaiting ON tool_calls (loop_id) WHERE (approval_status = 'pending'::text);
CREATE INDEX tool_calls_loop ON tool_calls (loop_id, message_id, "position");
CREATE INDEX tool_calls_unresolved ON tool_calls (id) WHERE (response_message_id IS NULL);

CREATE TABLE webhook_deliveries (
    id bigint GENERATED ALWAYS AS IDENTITY,
    endpoint_id bigint NOT NULL,
    message_id text NOT NULL,
    event_type text NOT NULL,
    loop_id uuid,
    payload jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    lease_token uuid,
    leased_until timestamp with time zone,
    lease_worker_id uuid,
    last_status integer,
    last_error text,
    last_attempt_at timestamp with time zone,
    delivered_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT webhook_deliveries_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text]))),
    CONSTRAINT webhook_deliveries_endpoint_id_message_id_key UNIQUE (endpoint_id, message_id),
    CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id)
) WITH (fillfactor='80');
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE (status = 'pending'::text);
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (updated_at) WHERE (status = ANY (ARRAY['delivered'::text, 'failed'::text]));

CREATE TABLE webhook_endpoints (
    id bigint GENERATED ALWAYS AS IDENTITY,
    url text NOT NULL,
    events text[] NOT NULL,
    secret_env text NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id),
    CONSTRAINT webhook_endpoints_url_key UNIQUE (url)
);

CREATE TABLE wire_parts (
    loop_id uuid NOT NULL,
    key bytea NOT NULL,
    body text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT wire_parts_pkey PRIMARY KEY (loop_id, key)
);
CREATE INDEX wire_parts_created ON wire_parts (created_at);
CREATE INDEX wire_parts_loop_created ON wire_parts (loop_id, created_at);

CREATE TABLE workers (
    id uuid NOT NULL,
    hostname text NOT NULL,
    pid integer NOT NULL,
    queues text[] NOT NULL,
    backend_pid integer,
    backend_start timestamp with time zone,
    version text,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    stopping boolean DEFAULT false NOT NULL,
    CONSTRAINT workers_pkey PRIMARY KEY (id)
) WITH (fillfactor='70');

-- Foreign keys, after every table they name.
ALTER TABLE events
    ADD CONSTRAINT events_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES loops(id) ON DELETE CASCADE;
ALTER TABLE jobs
    ADD CONSTRAINT jobs_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES loops(id) ON DELETE CASCADE;
ALTER TABLE jobs
    ADD CONSTRAINT jobs_tool_call_id_fkey FOREIGN KEY (tool_call_id) REFERENCES tool_calls(id) ON DELETE CASCADE;
ALTER TABLE loop_idempotency_keys
    ADD CONSTRAINT loop_idempotency_keys_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES loops(id) ON DELETE CASCADE;
ALTER TABLE loops
    ADD CONSTRAINT loops_forked_from_loop_id_fkey FOREIGN KEY (forked_from_loop_id) REFERENCES loops(id) ON DELETE SET NULL;
ALTER TABLE loops
    ADD CONSTRAINT loops_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES schedules(id) ON DELETE SET NULL;
ALTER TABLE mcp_sessions
    ADD CONSTRAINT mcp_sessions_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES loops(id) ON DELETE CASCADE;
ALTER TABLE mcp_tools
    ADD CONSTRAINT mcp_tools_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES loops(id) ON DELETE CASCADE;
ALTER TABLE mcp_tools
    ADD CONSTRAINT mcp_tools_mcp_session_id_fkey FOREIGN KEY (mcp_session_id) REFERENCES mcp_sessions(id) ON DELETE CASCADE;
ALTER TABLE messages
    ADD CONSTRAINT messages_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES loops(id) ON DELETE CASCADE;
ALTER TABLE provider_requests
    ADD CONSTRAINT provider_requests_provider_id_fkey FOREIGN KEY (provider_id) REFERENCES provider_state(id) ON DELETE CASCADE;
ALTER TABLE tool_calls
    ADD CONSTRAINT tool_calls_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES loops(id) ON DELETE CASCADE;
ALTER TABLE tool_calls
    ADD CONSTRAINT tool_calls_message_id_fkey FOREIGN KEY (message_id) REFERENCES messages(id) ON DELETE CASCADE;
ALTER TABLE webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoints(id) ON DELETE CASCADE;
ALTER TABLE wire_parts
    ADD CONSTRAINT wire_parts_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES loops(id) ON DELETE CASCADE;

-- Fleet-wide provider limits and concurrency-key counters: new tables only, no hot table
-- is altered here (0006 adds the loops columns). Expand-only: older code never reads them.
--   provider_state     one row per provider key (base_url + model + key fingerprint; the
--                      api token itself is never stored): the shared back-off deadline a
--                      429/503 Retry-After sets, the limits last admitted under, counters
--   provider_requests  one row per admitted model call: the rpm/tpm window (tokens are an
--                      estimate until the response's usage settles them) and, while
--                      unsettled and its turn still holds the lease, a concurrency slot
--   concurrency_keys   loops holding a slot per key; incremented by the claim, decremented
--                      by the loops trigger of 0006 when a loop leaves queued/running/waiting

CREATE TABLE provider_state (
    id               text PRIMARY KEY,
    base_url         text NOT NULL,
    model            text NOT NULL,
    key_fingerprint  text NOT NULL,
    blocked_until    timestamptz,
    last_status      integer,
    last_throttled_at timestamptz,
    max_concurrency  integer,
    rpm              integer,
    tpm              integer,
    throttled        bigint NOT NULL DEFAULT 0,
    admitted         bigint NOT NULL DEFAULT 0,
    deferred         bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 70);

CREATE TABLE provider_requests (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_id      text NOT NULL REFERENCES provider_state(id) ON DELETE CASCADE,
    loop_id          uuid NOT NULL,
    execution_token  uuid NOT NULL,
    tokens           integer NOT NULL DEFAULT 0,
    estimated        boolean NOT NULL DEFAULT true,
    settled          boolean NOT NULL DEFAULT false,
    admitted_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX provider_requests_window ON provider_requests (provider_id, admitted_at, id);
CREATE INDEX provider_requests_unsettled ON provider_requests (provider_id) WHERE NOT settled;

CREATE TABLE concurrency_keys (
    key              text PRIMARY KEY,
    running          integer NOT NULL DEFAULT 0 CHECK (running >= 0),
    updated_at       timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 70);

-- The job queue (see worker/src/queue.rs) and the workers serving it.
--
-- A job is queued, leased by one worker (`running`, with a lease the worker
-- extends by heartbeats), then `done`, `failed` (the program's fault: not
-- retried), `dead` (out of attempts: the dead letter, with the last error) or
-- `cancelled`. An expired lease puts the job back in the queue.
CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,
    kind             TEXT NOT NULL,
    capability       TEXT NOT NULL DEFAULT 'cpu',
    payload          JSONB NOT NULL,
    key              TEXT,
    status           TEXT NOT NULL DEFAULT 'queued',
    attempts         INT NOT NULL DEFAULT 0,
    max_attempts     INT NOT NULL DEFAULT 3,
    run_after        TIMESTAMPTZ NOT NULL DEFAULT now(),
    leased_by        TEXT,
    lease_expires_at TIMESTAMPTZ,
    result           JSONB,
    error            JSONB,
    events           JSONB NOT NULL DEFAULT '[]'::jsonb,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    finished_at      TIMESTAMPTZ
);

CREATE INDEX jobs_ready ON jobs (capability, created_at) WHERE status = 'queued';
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE status = 'running';

CREATE TABLE workers (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INT NOT NULL,
    capabilities TEXT[] NOT NULL,
    concurrency  INT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    jobs_done    BIGINT NOT NULL DEFAULT 0
);

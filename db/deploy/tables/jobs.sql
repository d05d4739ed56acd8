-- Deploy pgfence:tables/jobs to pg
-- requires: schema

BEGIN;

-- One row per job. Columns are written only by the pgfence functions.
CREATE TABLE pgfence.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text        NOT NULL DEFAULT 'default',
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}',
    status           text        NOT NULL DEFAULT 'queued',
    priority         integer     NOT NULL DEFAULT 0,
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 3,
    available_at     timestamptz NOT NULL DEFAULT now(),
    recovery_policy  text        NOT NULL DEFAULT 'auto',
    idempotency_key  text,
    attempt_token    uuid,
    reserved_by      text,
    reserved_at      timestamptz,
    heartbeat_at     timestamptz,
    lease_expires_at timestamptz,
    reclaim_count    integer     NOT NULL DEFAULT 0,
    last_error       text,
    result           jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    enqueued_by      text        NOT NULL DEFAULT current_user,

    CONSTRAINT jobs_status_valid CHECK (
        status IN ('queued', 'processing', 'done', 'failed', 'manual_review', 'cancelled')),
    CONSTRAINT jobs_recovery_policy_valid CHECK (recovery_policy IN ('auto', 'manual')),
    CONSTRAINT jobs_queue_length CHECK (char_length(queue) BETWEEN 1 AND 128),
    CONSTRAINT jobs_kind_length CHECK (char_length(kind) BETWEEN 1 AND 128),
    CONSTRAINT jobs_idempotency_key_length CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT jobs_payload_object CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT jobs_attempts_nonnegative CHECK (attempts >= 0 AND reclaim_count >= 0),
    CONSTRAINT jobs_max_attempts_positive CHECK (max_attempts >= 1),
    -- A processing row always carries its fence and its lease.
    CONSTRAINT jobs_processing_has_lease CHECK (
        status <> 'processing'
        OR (attempt_token IS NOT NULL AND lease_expires_at IS NOT NULL
            AND reserved_by IS NOT NULL AND reserved_at IS NOT NULL AND attempts >= 1)),
    -- A queued row belongs to nobody.
    CONSTRAINT jobs_queued_has_no_lease CHECK (
        status <> 'queued'
        OR (attempt_token IS NULL AND lease_expires_at IS NULL
            AND reserved_by IS NULL AND reserved_at IS NULL AND heartbeat_at IS NULL)),
    -- Only a processing row has a lease.
    CONSTRAINT jobs_lease_only_when_processing CHECK (
        (status = 'processing') = (lease_expires_at IS NOT NULL)),
    -- finished_at marks the terminal states, and only them.
    CONSTRAINT jobs_finished_at_terminal CHECK (
        (status IN ('done', 'failed', 'cancelled')) = (finished_at IS NOT NULL))
)
-- Autovacuum, chosen by measurement (README, Performance): every job leaves two
-- dead row versions (claim, complete) and dead entries in the claim index, while
-- retention keeps up to a day of finished rows. With the defaults (20% of the
-- table, throttled) a 90 s sustained drain had a median of 24.3k jobs/s, falling
-- from 25.6k to 16-18k (3M dead rows, claim index 97 MB for 50k queued jobs);
-- vacuuming after 10,000 rows plus 1% of the table, unthrottled, with
-- autovacuum_naptime = 5s kept it at 28-33k, median 30.9k (claim index 20 MB).
-- The naptime is a server setting: see the DBA section.
WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 10000,
      autovacuum_vacuum_cost_delay = 0);

COMMENT ON TABLE pgfence.jobs IS
  'pgfence jobs, one row per job. Write through the pgfence functions only: they hold the fencing rules.';
COMMENT ON COLUMN pgfence.jobs.status IS
  'queued | processing | done | failed (dead letter) | manual_review (manual job whose lease expired) | cancelled';
COMMENT ON COLUMN pgfence.jobs.attempts IS
  'Attempts counted so far: every claim adds one; release with started => false takes it back.';
COMMENT ON COLUMN pgfence.jobs.available_at IS 'Runnable from then on; a retry backoff is a future available_at.';
COMMENT ON COLUMN pgfence.jobs.attempt_token IS
  'The fence: a fresh value on every claim. Kept on done rows, and on rows fail dead-lettered, as the token that finished the job.';
COMMENT ON COLUMN pgfence.jobs.lease_expires_at IS
  'The one column that decides reclaim: a processing row past it may be reclaimed.';
COMMENT ON COLUMN pgfence.jobs.heartbeat_at IS 'Last heartbeat of the current attempt (for humans; never decides anything).';
COMMENT ON COLUMN pgfence.jobs.reserved_at IS 'When the current or last attempt claimed the job (audit only).';
COMMENT ON COLUMN pgfence.jobs.reclaim_count IS 'How many times an expired lease was reclaimed.';
COMMENT ON COLUMN pgfence.jobs.enqueued_by IS
  'The role that called enqueue (SET ROLE respected); producers see only their own jobs (row-level security).';

-- Claim order: per queue, priority DESC, available_at, id. Partial, so finished
-- jobs and in-flight jobs never sit in it.
CREATE INDEX jobs_claim_idx ON pgfence.jobs (queue, priority DESC, available_at, id)
    WHERE status = 'queued';

-- The reclaim sweep's index: expired leases, oldest first.
CREATE INDEX jobs_reclaim_idx ON pgfence.jobs (lease_expires_at)
    WHERE status = 'processing';

-- Idempotency: one live-or-done job per (queue, key). failed and cancelled free the key.
CREATE UNIQUE INDEX jobs_idempotency_idx ON pgfence.jobs (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL
      AND status IN ('queued', 'processing', 'manual_review', 'done');

COMMIT;

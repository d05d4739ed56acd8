-- Deploy pgfence:tables/attempts to pg
-- requires: tables/jobs

BEGIN;

-- One row per ended attempt (the running attempt lives on the jobs row). Written
-- by the transition that ends it, in the same transaction, so history and state
-- never disagree. Deleted with its job by the retention purge.
CREATE TABLE pgfence.attempts (
    job_id           bigint      NOT NULL,
    attempt          integer     NOT NULL,
    attempt_token    uuid        NOT NULL,
    worker           text        NOT NULL,
    claimed_at       timestamptz NOT NULL,
    heartbeat_at     timestamptz,
    lease_expires_at timestamptz,
    ended_at         timestamptz NOT NULL,
    outcome          text        NOT NULL,
    error            text,
    CONSTRAINT attempts_outcome_valid CHECK (
        outcome IN ('done', 'failed', 'reclaimed', 'released', 'cancelled'))
);
CREATE INDEX attempts_job_idx ON pgfence.attempts (job_id);

COMMENT ON TABLE pgfence.attempts IS
  'Ended attempts of each job: token, worker, claimed_at, last heartbeat, the lease it held, when and how it ended.';
COMMENT ON COLUMN pgfence.attempts.lease_expires_at IS
  'The lease the attempt held when it ended (for reclaimed: the expiry that had passed).';
COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled';

-- Calls refused by the fence (a stale token): who tried what, when, and why it
-- was refused. Batch calls record their refusals themselves; a single call that
-- raised PF001 is rolled back, so callers report it with report_rejection.
CREATE TABLE pgfence.rejections (
    job_id        bigint      NOT NULL,
    attempt_token uuid        NOT NULL,
    operation     text        NOT NULL,
    caller        text        NOT NULL,
    detail        text,
    rejected_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX rejections_job_idx ON pgfence.rejections (job_id);

COMMENT ON TABLE pgfence.rejections IS
  'Fenced calls refused because their attempt token was not current (zombie workers, late completions).';

COMMIT;

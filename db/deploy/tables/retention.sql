-- Deploy pgfence:tables/retention to pg
-- requires: tables/jobs

BEGIN;

-- How long finished jobs (and their attempts) are kept before the sweeper
-- deletes them, per queue. The row with queue = '' is the default (no real queue
-- has an empty name). done and cancelled jobs: 1 day; failed (dead letter): 7 days.
CREATE TABLE pgfence.retention (
    queue         text     PRIMARY KEY,
    retain_done   interval NOT NULL,
    retain_failed interval NOT NULL,
    CONSTRAINT retention_positive CHECK (retain_done >= interval '0' AND retain_failed >= interval '0')
);
INSERT INTO pgfence.retention VALUES ('', interval '1 day', interval '7 days');

COMMENT ON TABLE pgfence.retention IS
  'Per-queue retention of finished jobs (queue '''' = default: done/cancelled 1 day, failed 7 days). Set with pgfence.set_retention.';

-- The purge walks finished jobs oldest first.
CREATE INDEX jobs_finished_idx ON pgfence.jobs (finished_at)
    WHERE status IN ('done', 'failed', 'cancelled');

COMMIT;

-- Revert pgfence:tables/job_timeouts from pg
--
-- After the routines that know the timeout are back to @v0.7.0 (later changes are
-- reverted first). Attempts that timed out are kept as reclaimed (what their lease
-- ending was called before); jobs lose their timeout.

BEGIN;

ALTER TABLE pgfence.attempts DROP CONSTRAINT attempts_outcome_valid;
UPDATE pgfence.attempts SET outcome = 'reclaimed' WHERE outcome = 'timed_out';
ALTER TABLE pgfence.attempts ADD CONSTRAINT attempts_outcome_valid CHECK (
    outcome IN ('done', 'failed', 'reclaimed', 'released', 'cancelled'));
COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled';

ALTER TABLE pgfence.jobs DROP COLUMN timeout;

COMMIT;

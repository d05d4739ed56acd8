-- Revert pgfence:tables/job_timeouts from pg
--
-- After the routines that know the timeout are back to @v0.7.0 (later changes are
-- reverted first). Attempts that timed out are kept as reclaimed (what their lease
-- ending was called before); jobs lose their timeout. The rows are rewritten first
-- (row locks only), then the ACCESS EXCLUSIVE locks are taken by pg_temp.locked (100
-- ms tries: no claim or complete queues behind a request that waits for a long
-- transaction) and the constraint is put back NOT VALID, validated apart.

\ir ../../include/lock_retry.sql

BEGIN;

UPDATE pgfence.attempts SET outcome = 'reclaimed' WHERE outcome = 'timed_out';
SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.attempts DROP CONSTRAINT attempts_outcome_valid, '
    'ADD CONSTRAINT attempts_outcome_valid CHECK ('
    'outcome IN (''done'', ''failed'', ''reclaimed'', ''released'', ''cancelled'')) NOT VALID',
    'ALTER TABLE pgfence.jobs DROP COLUMN timeout']);
DROP DOMAIN pgfence.run_timeout;
COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled';

COMMIT;

BEGIN;

ALTER TABLE pgfence.attempts VALIDATE CONSTRAINT attempts_outcome_valid;

COMMIT;

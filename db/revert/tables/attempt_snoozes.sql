-- Revert pgfence:tables/attempt_snoozes from pg
--
-- The outcome list as before (tables/job_timeouts' list). Attempts recorded snoozed meanwhile are kept, as
-- released (given back; the snooze is named in their error), which the old list allows.
-- The constraint is swapped as the deploy swaps it (lock_timeout 100 ms, retried; NOT
-- VALID, then validated in a transaction of its own).

\ir ../../include/lock_retry.sql

BEGIN;

UPDATE pgfence.attempts
   SET outcome = 'released', error = coalesce(error, 'snoozed (recorded as released when snooze was reverted)')
 WHERE outcome = 'snoozed';
SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.attempts DROP CONSTRAINT attempts_outcome_valid, '
    'ADD CONSTRAINT attempts_outcome_valid CHECK ('
    'outcome IN (''done'', ''failed'', ''reclaimed'', ''released'', ''cancelled'', ''timed_out'')) NOT VALID']);

COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled | timed_out (its lease ended at the run timeout)';

COMMIT;

BEGIN;

ALTER TABLE pgfence.attempts VALIDATE CONSTRAINT attempts_outcome_valid;

COMMIT;

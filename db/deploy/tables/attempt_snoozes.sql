-- Deploy pgfence:tables/attempt_snoozes to pg
-- requires: tables/attempts
-- requires: data/job_queue_keys
-- requires: tables/job_timeouts
--
-- An attempt can end snoozed (functions/snooze): the handler asked to run the job again
-- later, which is not a failure. Only the outcome constraint of pgfence.attempts changes
-- (the history's earlier_attempts keep whatever pgfence.attempts held). The swap is a
-- catalog change under ACCESS EXCLUSIVE, taken with lock_timeout 100 ms and retried
-- (pg_temp.locked, db/include/lock_retry.sql), so fenced calls wait at most 100 ms behind
-- a try; the new constraint is added NOT VALID and validated in a transaction of its own
-- (SHARE UPDATE EXCLUSIVE: writes go on while the rows are checked).
-- (It comes after tables/job_timeouts, which added timed_out: the list names every outcome.)

\ir ../../include/lock_retry.sql

BEGIN;

SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.attempts DROP CONSTRAINT attempts_outcome_valid, '
    'ADD CONSTRAINT attempts_outcome_valid CHECK ('
    'outcome IN (''done'', ''failed'', ''reclaimed'', ''released'', ''cancelled'', ''timed_out'', ''snoozed'')) NOT VALID']);

COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled | timed_out (its lease ended at the run timeout) | snoozed (run again later; not a failure)';

COMMIT;

BEGIN;

ALTER TABLE pgfence.attempts VALIDATE CONSTRAINT attempts_outcome_valid;

COMMIT;

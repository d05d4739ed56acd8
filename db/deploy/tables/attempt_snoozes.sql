-- Deploy pgfence:tables/attempt_snoozes to pg
-- requires: tables/attempts
-- requires: data/job_queue_keys
--
-- An attempt can end snoozed (functions/snooze): the handler asked to run the job again
-- later, which is not a failure. Only the outcome constraint of pgfence.attempts changes
-- (the history's earlier_attempts keep whatever pgfence.attempts held). The swap is a
-- catalog change under ACCESS EXCLUSIVE, taken with lock_timeout 100 ms and retried
-- (pg_temp.locked, db/include/lock_retry.sql), so fenced calls wait at most 100 ms behind
-- a try; the new constraint is added NOT VALID and validated in a transaction of its own
-- (SHARE UPDATE EXCLUSIVE: writes go on while the rows are checked).
-- (Merging: another change may extend the same list, e.g. with timed_out; whichever is
-- deployed later must name every outcome.)

\ir ../../include/lock_retry.sql

BEGIN;

SELECT pg_temp.locked(ARRAY[
    'ALTER TABLE pgfence.attempts DROP CONSTRAINT attempts_outcome_valid, '
    'ADD CONSTRAINT attempts_outcome_valid CHECK ('
    'outcome IN (''done'', ''failed'', ''reclaimed'', ''released'', ''cancelled'', ''snoozed'')) NOT VALID']);

COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled | snoozed (run again later; not a failure)';

COMMIT;

BEGIN;

ALTER TABLE pgfence.attempts VALIDATE CONSTRAINT attempts_outcome_valid;

COMMIT;

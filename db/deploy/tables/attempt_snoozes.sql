-- Deploy pgfence:tables/attempt_snoozes to pg
-- requires: tables/attempts
-- requires: data/job_queue_keys
--
-- An attempt can end snoozed (functions/snooze): the handler asked to run the job again
-- later, which is not a failure. Only the outcome constraint of pgfence.attempts changes
-- (the history's earlier_attempts keep whatever pgfence.attempts held). The constraint is
-- added NOT VALID and validated after, so the table is not locked against writes while
-- its rows are checked.
-- (Merging: another change may extend the same list, e.g. with timed_out; whichever is
-- deployed later must name every outcome.)

BEGIN;

ALTER TABLE pgfence.attempts DROP CONSTRAINT attempts_outcome_valid;
ALTER TABLE pgfence.attempts ADD CONSTRAINT attempts_outcome_valid CHECK (
    outcome IN ('done', 'failed', 'reclaimed', 'released', 'cancelled', 'snoozed')) NOT VALID;
ALTER TABLE pgfence.attempts VALIDATE CONSTRAINT attempts_outcome_valid;

COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled | snoozed (run again later; not a failure)';

COMMIT;

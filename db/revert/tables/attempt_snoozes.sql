-- Revert pgfence:tables/attempt_snoozes from pg
--
-- The outcome list as before. Attempts recorded snoozed meanwhile are kept, as
-- released (given back; the snooze is named in their error), which the old list allows.

BEGIN;

ALTER TABLE pgfence.attempts DROP CONSTRAINT attempts_outcome_valid;
UPDATE pgfence.attempts
   SET outcome = 'released', error = coalesce(error, 'snoozed (recorded as released when snooze was reverted)')
 WHERE outcome = 'snoozed';
ALTER TABLE pgfence.attempts ADD CONSTRAINT attempts_outcome_valid CHECK (
    outcome IN ('done', 'failed', 'reclaimed', 'released', 'cancelled')) NOT VALID;
ALTER TABLE pgfence.attempts VALIDATE CONSTRAINT attempts_outcome_valid;

COMMENT ON COLUMN pgfence.attempts.outcome IS
  'done | failed (error kept; the job retried or was dead-lettered) | reclaimed (lease expired) | released (given back) | cancelled';

COMMIT;

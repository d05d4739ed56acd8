-- Verify pgfence:tables/attempt_snoozes on pg

BEGIN;

SELECT 1 / count(*) FROM pg_constraint
 WHERE conrelid = 'pgfence.attempts'::regclass AND conname = 'attempts_outcome_valid'
   AND convalidated AND pg_get_constraintdef(oid) LIKE '%snoozed%';

ROLLBACK;

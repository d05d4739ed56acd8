-- Deploy pgfence:data/finished_jobs to pg
-- requires: functions/complete
-- requires: functions/history
-- requires: functions/retention
--
-- Moves the done jobs a version before this one left in pgfence.jobs into the history
-- (pgfence.finished_jobs), with their attempts and held idempotency keys, 10,000 per
-- committed transaction: no table is locked, claims, completions and enqueues go on,
-- and every live lease and token stays valid (live jobs are not touched). It comes
-- after the reworked complete, so no done job is added to pgfence.jobs meanwhile.
-- Done jobs already past their retention are deleted, as the purge would have.
--
-- (No transaction: the procedure commits each batch. Re-runnable: a second run finds
-- nothing to move.)

CALL pgfence._move_done_to_history(10000);

-- Revert pgfence:functions/purge_plans from pg
--
-- purge_finished plans with the session's settings again (its lock_timeout stays).

BEGIN;

ALTER FUNCTION pgfence.purge_finished(integer) RESET enable_seqscan;
ALTER FUNCTION pgfence.purge_finished(integer) RESET jit;

COMMIT;

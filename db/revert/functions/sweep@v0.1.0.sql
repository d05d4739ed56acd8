-- Revert pgfence:functions/sweep from pg

BEGIN;

DROP FUNCTION pgfence.sweeper_last_pass();
DROP FUNCTION pgfence.note_sweeper_pass(bigint, bigint);
DROP PROCEDURE pgfence.run_sweeper(interval, timestamptz);
DROP PROCEDURE pgfence.sweep(bigint, integer);

COMMIT;

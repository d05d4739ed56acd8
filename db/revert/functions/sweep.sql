-- Revert pgfence:functions/sweep from pg

BEGIN;

DROP FUNCTION pgfence.sweeper_last_pass();
DROP PROCEDURE pgfence.run_sweeper(interval, timestamptz);
DROP PROCEDURE pgfence.sweep(bigint, integer);

COMMIT;

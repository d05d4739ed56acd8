-- Revert pgfence:functions/sweep from pg

BEGIN;

DROP PROCEDURE pgfence.run_sweeper(interval, timestamptz);
DROP PROCEDURE pgfence.sweep(bigint, integer);

COMMIT;

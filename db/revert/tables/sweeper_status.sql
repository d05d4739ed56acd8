-- Revert pgfence:tables/sweeper_status from pg

BEGIN;

DROP TABLE pgfence.sweeper_status;

COMMIT;

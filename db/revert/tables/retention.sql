-- Revert pgfence:tables/retention from pg

BEGIN;

DROP INDEX pgfence.jobs_finished_idx;
DROP TABLE pgfence.retention;

COMMIT;

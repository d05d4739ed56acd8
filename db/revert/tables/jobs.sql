-- Revert pgfence:tables/jobs from pg

BEGIN;

DROP TABLE pgfence.jobs;

COMMIT;

-- Verify pgfence:data/finished_jobs on pg

BEGIN;

SELECT 1 / (NOT EXISTS (SELECT FROM pgfence.jobs WHERE status = 'done'))::int;

ROLLBACK;

-- Verify pgfence:tables/retention on pg

BEGIN;

SELECT 1 / count(*) FROM pgfence.retention WHERE queue = '';
SELECT 'pgfence.jobs_finished_idx'::regclass;

ROLLBACK;

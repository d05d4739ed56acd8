-- Verify pgfence:tables/job_row_rules on pg

BEGIN;

-- One validated CHECK calls the rules; the five it replaced are gone.
SELECT 1 / (count(*) = 1)::int FROM pg_constraint
 WHERE conrelid = 'pgfence.jobs'::regclass AND conname = 'jobs_row_rules' AND convalidated
   AND pg_get_constraintdef(oid) LIKE '%pgfence._job_row_rules(%';
SELECT 1 / (count(*) = 0)::int FROM pg_constraint
 WHERE conrelid = 'pgfence.jobs'::regclass
   AND conname IN ('jobs_processing_has_lease', 'jobs_queued_has_no_lease', 'jobs_lease_only_when_processing',
                   'jobs_finished_at_terminal', 'jobs_lease_within_timeout');
SELECT pgfence._job_row_rules(1, 'queued', 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL);

ROLLBACK;

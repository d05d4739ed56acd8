-- Verify pgfence:tables/jobs on pg

BEGIN;

SELECT id, queue, kind, payload, status, priority, attempts, max_attempts, available_at,
       recovery_policy, idempotency_key, attempt_token, reserved_by, reserved_at,
       heartbeat_at, lease_expires_at, reclaim_count, last_error, result,
       created_at, updated_at, finished_at, enqueued_by
  FROM pgfence.jobs WHERE false;

SELECT 1 / (count(*) = 3)::int FROM pg_catalog.pg_indexes
 WHERE schemaname = 'pgfence'
   AND indexname IN ('jobs_claim_idx', 'jobs_reclaim_idx', 'jobs_idempotency_idx');

-- The measured autovacuum settings are in place.
SELECT 1 / coalesce(reloptions @> ARRAY['autovacuum_vacuum_scale_factor=0.01', 'autovacuum_vacuum_threshold=10000',
                                         'autovacuum_vacuum_cost_delay=0'], false)::int
  FROM pg_catalog.pg_class WHERE oid = 'pgfence.jobs'::regclass;

ROLLBACK;

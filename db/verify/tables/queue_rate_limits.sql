-- Verify pgfence:tables/queue_rate_limits on pg

BEGIN;

SELECT max_claims, claims_per, rate_tokens, rate_refilled_at, rate_limited_at, rate_limited_by
  FROM pgfence.queue_controls WHERE false;
SELECT 1 / count(*) FROM pg_constraint
 WHERE conrelid = 'pgfence.queue_controls'::regclass AND conname = 'queue_controls_some'
   AND pg_get_constraintdef(oid) LIKE '%max_claims%';

ROLLBACK;

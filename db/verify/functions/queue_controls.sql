-- Verify pgfence:functions/queue_controls on pg

BEGIN;

SELECT 'pgfence.pause_queue(text)'::regprocedure,
       'pgfence.resume_queue(text)'::regprocedure,
       'pgfence.set_queue_limit(text, integer)'::regprocedure,
       'pgfence.set_queue_rate_limit(text, integer, interval)'::regprocedure,
       'pgfence.queue_limits()'::regprocedure,
       'pgfence._rate_tokens(integer, interval, double precision, timestamptz, timestamptz)'::regprocedure,
       'pgfence._rate_allowance(integer, interval, double precision, timestamptz, timestamptz)'::regprocedure,
       'pgfence._claim_controlled(text[], integer, timestamptz)'::regprocedure,
       'pgfence._claim_controlled(jsonb, integer, integer, timestamptz)'::regprocedure;
SELECT 1 / count(*) FROM pg_proc
 WHERE oid = 'pgfence._claim_controlled(jsonb, integer, integer, timestamptz)'::regprocedure AND prosrc LIKE '%max_claims%';
SELECT 1 / count(*) FROM pg_proc  -- (a changed limit settles its bucket at the old rate first)
 WHERE oid = 'pgfence.set_queue_rate_limit(text, integer, interval)'::regprocedure
   AND prosrc LIKE '%pgfence._rate_tokens(c.max_claims, c.claims_per%';

ROLLBACK;

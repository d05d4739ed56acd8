-- Verify pgfence:functions/queue_controls on pg

BEGIN;

SELECT 'pgfence.pause_queue(text)'::regprocedure,
       'pgfence.resume_queue(text)'::regprocedure,
       'pgfence.set_queue_limit(text, integer)'::regprocedure,
       'pgfence.queue_limits()'::regprocedure,
       'pgfence._claim_controlled(text[], integer, timestamptz)'::regprocedure;

ROLLBACK;

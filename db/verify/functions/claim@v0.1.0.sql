-- Verify pgfence:functions/claim on pg

BEGIN;

SELECT 'pgfence.claim(text, text[], interval, integer)'::regprocedure,
       'pgfence._queued_queues()'::regprocedure;

ROLLBACK;

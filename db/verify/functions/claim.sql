-- Verify pgfence:functions/claim on pg

BEGIN;

SELECT 'pgfence.claim(text, text[], interval, integer, uuid)'::regprocedure,
       'pgfence.claimed(text, uuid[])'::regprocedure,
       'pgfence._request_prefix(uuid, timestamptz)'::regprocedure,
       'pgfence._request_token(text, bigint, integer)'::regprocedure,
       'pgfence._queued_queues()'::regprocedure;

ROLLBACK;

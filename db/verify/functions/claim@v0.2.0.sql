-- Verify pgfence:functions/claim on pg

BEGIN;

SELECT 'pgfence.claim(text, text[], interval, integer, uuid)'::regprocedure,
       'pgfence.claimed(text, uuid[], interval)'::regprocedure,
       'pgfence._lock_request(uuid)'::regprocedure,
       'pgfence._request_prefix(uuid, timestamptz)'::regprocedure,
       'pgfence._request_token(text, bigint, integer)'::regprocedure,
       'pgfence._queued_queues()'::regprocedure;
SELECT 1 / has_function_privilege('pgfence_worker', 'pgfence.claimed(text, uuid[], interval)', 'EXECUTE')::int;
SELECT 1 / (to_regprocedure('pgfence.claim(text, text[], interval, integer)') IS NULL)::int;

ROLLBACK;

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
-- The rework after @v0.2.0: the probe before _reclaim, and claim still SECURITY DEFINER
-- with its search_path pinned (CREATE OR REPLACE restates both).
SELECT 1 / (prosecdef AND prosrc LIKE '%IF EXISTS (SELECT FROM pgfence.jobs j WHERE j.status = ''processing''%'
            AND 'search_path=pg_catalog, pgfence, pg_temp' = ANY (proconfig))::int
  FROM pg_proc WHERE oid = 'pgfence.claim(text, text[], interval, integer, uuid)'::regprocedure;

ROLLBACK;

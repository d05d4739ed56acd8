-- Verify pgfence:functions/claim on pg

BEGIN;

SELECT 'pgfence.claim(text, text[], interval, integer, uuid, text)'::regprocedure,
       'pgfence.claimed(text, uuid[], interval)'::regprocedure,
       'pgfence._lock_request(uuid)'::regprocedure,
       'pgfence._request_lock_key(text, uuid)'::regprocedure,
       'pgfence._request_prefix(uuid, timestamptz)'::regprocedure,
       'pgfence._request_token(text, bigint, integer)'::regprocedure,
       'pgfence._names_ok(text[])'::regprocedure;
SELECT 1 / (to_regprocedure('pgfence._queued_queues()') IS NULL)::int;
SELECT 1 / has_function_privilege('pgfence_worker', 'pgfence.claimed(text, uuid[], interval)', 'EXECUTE')::int;
SELECT 1 / (to_regprocedure('pgfence.claim(text, text[], interval, integer)') IS NULL)::int;
-- The probe before _reclaim and FOR NO KEY UPDATE, claim still SECURITY DEFINER with
-- its search_path pinned; the list search in _claim_from_set (the rework after
-- @v0.4.0), claim_results with claimed() calling it.
SELECT 1 / (prosecdef AND prosrc LIKE '%IF EXISTS (SELECT FROM pgfence.jobs j WHERE j.status = ''processing''%'
            AND prosrc LIKE '%pgfence._claim_from_set(%' AND prosrc NOT LIKE '%FOR UPDATE%'
            AND 'search_path=pg_catalog, pgfence, pg_temp' = ANY (proconfig))::int
  FROM pg_proc WHERE oid = 'pgfence.claim(text, text[], interval, integer, uuid, text)'::regprocedure;
SELECT 1 / (prosrc LIKE '%WITH heads AS%' AND prosrc NOT LIKE '%FOR UPDATE SKIP%')::int
  FROM pg_proc WHERE oid = 'pgfence._claim_from_set(jsonb, integer, integer, timestamptz)'::regprocedure;
SELECT 1 / (prosrc LIKE '%FOR NO KEY UPDATE OF j%')::int
  FROM pg_proc WHERE oid = 'pgfence.claim_results(text, uuid[], interval)'::regprocedure;
SELECT 1 / (prosrc LIKE '%pgfence.claim_results(%')::int
  FROM pg_proc WHERE oid = 'pgfence.claimed(text, uuid[], interval)'::regprocedure;
SELECT 1 / has_function_privilege('pgfence_worker', 'pgfence.claim_results(text, uuid[], interval)', 'EXECUTE')::int;
-- (the request lock keyed with the secret key)
SELECT 1 / (prosrc LIKE '%pgfence.secret_key%')::int
  FROM pg_proc WHERE oid = 'pgfence._lock_request(uuid)'::regprocedure;

-- (the rework after @v0.6.0: queue controls)
SELECT 1 / (prosrc LIKE '%pgfence._claim_controlled(%')::int
  FROM pg_proc WHERE oid = 'pgfence.claim(text, text[], interval, integer, uuid, text)'::regprocedure;

-- (the rework after @v0.7.0: the lease capped at the run timeout; waited_s in the rows)
SELECT 1 / (prosrc LIKE '%least(v_now + lease, v_now + j.timeout)%' AND 'waited_s' = ANY (proargnames))::int
  FROM pg_proc WHERE oid = 'pgfence.claim(text, text[], interval, integer, uuid, text)'::regprocedure;
SELECT 1 / ('waited_s' = ANY (proargnames))::int
  FROM pg_proc WHERE oid IN ('pgfence.claim_results(text, uuid[], interval)'::regprocedure,
                             'pgfence.claimed(text, uuid[], interval)'::regprocedure);
-- (queue_set: a set stored in pgfence.queue_sets)
SELECT 1 / (prosrc LIKE '%FROM pgfence.queue_sets s%' AND 'queue_set' = ANY (proargnames))::int
  FROM pg_proc WHERE oid = 'pgfence.claim(text, text[], interval, integer, uuid, text)'::regprocedure;
SELECT 1 / (to_regprocedure('pgfence.claim(text, text[], interval, integer, uuid)') IS NULL)::int;

ROLLBACK;

-- Verify pgfence:functions/_checks on pg

BEGIN;

SELECT 'pgfence._raise_null(text, text)'::regprocedure,
       'pgfence._raise_invalid(text, text, text, text)'::regprocedure,
       'pgfence._name_ok(text)'::regprocedure,
       'pgfence._payload_ok(jsonb)'::regprocedure,
       'pgfence._check_name(text, text)'::regprocedure,
       'pgfence._interval_signs_agree(interval)'::regprocedure,
       'pgfence._check_interval(text, interval, interval, interval, text, text)'::regprocedure,
       'pgfence._check_lease(interval)'::regprocedure,
       'pgfence._array_ok(anyarray)'::regprocedure,
       'pgfence._check_array(text, anyarray)'::regprocedure,
       'pgfence._payload_size(jsonb)'::regprocedure,
       'pgfence._run_at_ok(timestamptz)'::regprocedure,
       'pgfence._check_run_at(text, timestamptz)'::regprocedure,
       'pgfence._check_range(text, integer, integer, integer)'::regprocedure,
       'pgfence._check_payload(text, jsonb)'::regprocedure,
       'pgfence._check_batch(bigint[], uuid[])'::regprocedure,
       'pgfence._check_isolation(text)'::regprocedure,
       'pgfence._invoker()'::regprocedure,
       'pgfence._unsafe_chars()'::regprocedure,
       'pgfence._edge_chars()'::regprocedure,
       'pgfence._modifier_chars()'::regprocedure,
       'pgfence._printable(text)'::regprocedure,
       'pgfence._json_nesting_ok(jsonb, integer)'::regprocedure,
       'pgfence._check_json_limits(text, jsonb)'::regprocedure,
       'pgfence._result_ok(jsonb)'::regprocedure,
       'pgfence._check_result(text, jsonb)'::regprocedure;
-- The rules of the rework after @v0.3.0: Unicode edges, controls anywhere, 64 levels.
SELECT 1 / (NOT pgfence._name_ok(E'q\u00a0') AND NOT pgfence._name_ok(E'a\u001bb') AND pgfence._name_ok('a b'))::int;
SELECT 1 / (pgfence._payload_ok((repeat('{"a":', 63) || '{}' || repeat('}', 63))::jsonb)
            AND NOT pgfence._payload_ok((repeat('{"a":', 64) || '{}' || repeat('}', 64))::jsonb))::int;

ROLLBACK;

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
       'pgfence._invoker()'::regprocedure;

ROLLBACK;

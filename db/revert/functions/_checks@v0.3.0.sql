-- Revert pgfence:functions/_checks from pg

BEGIN;

DROP FUNCTION pgfence._invoker();
DROP FUNCTION pgfence._check_isolation(text);

DROP FUNCTION pgfence._check_batch(bigint[], uuid[]);
DROP FUNCTION pgfence._check_run_at(text, timestamptz);
DROP FUNCTION pgfence._run_at_ok(timestamptz);
DROP FUNCTION pgfence._check_payload(text, jsonb);
DROP FUNCTION pgfence._payload_ok(jsonb);
DROP FUNCTION pgfence._payload_size(jsonb);
DROP FUNCTION pgfence._check_range(text, integer, integer, integer);
DROP FUNCTION pgfence._check_array(text, anyarray);
DROP FUNCTION pgfence._array_ok(anyarray);
DROP FUNCTION pgfence._check_lease(interval);
DROP FUNCTION pgfence._check_interval(text, interval, interval, interval, text, text);
DROP FUNCTION pgfence._interval_signs_agree(interval);
DROP FUNCTION pgfence._check_name(text, text);
DROP FUNCTION pgfence._name_ok(text);
DROP FUNCTION pgfence._raise_invalid(text, text, text, text);
DROP FUNCTION pgfence._raise_null(text, text);

COMMIT;

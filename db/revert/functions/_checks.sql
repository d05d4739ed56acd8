-- Revert pgfence:functions/_checks from pg

BEGIN;

DROP FUNCTION pgfence._invoker();
DROP FUNCTION pgfence._check_isolation(text);

DROP FUNCTION pgfence._check_batch(bigint[], uuid[]);
DROP FUNCTION pgfence._check_payload(text, jsonb);
DROP FUNCTION pgfence._payload_ok(jsonb);
DROP FUNCTION pgfence._check_range(text, integer, integer, integer);
DROP FUNCTION pgfence._check_lease(interval);
DROP FUNCTION pgfence._check_name(text, text);
DROP FUNCTION pgfence._name_ok(text);
DROP FUNCTION pgfence._raise_invalid(text, text, text, text);
DROP FUNCTION pgfence._raise_null(text, text);

COMMIT;

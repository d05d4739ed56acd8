-- Verify pgfence:tables/wakeup on pg

BEGIN;

SELECT 1 / (count(*) = 1)::int FROM pgfence.wakeup_key WHERE char_length(key) = 64;
SELECT 1 / has_function_privilege('pgfence_worker', 'pgfence.wakeup_tags(text[])', 'EXECUTE')::int;
SELECT 1 / (NOT has_table_privilege('pgfence_worker', 'pgfence.wakeup_key', 'SELECT'))::int;

ROLLBACK;

-- Verify pgfence:tables/secret_key on pg

BEGIN;

SELECT 1 / (count(*) = 1)::int FROM pgfence.secret_key WHERE char_length(key) = 64;
SELECT 1 / has_function_privilege('pgfence_worker', 'pgfence.wakeup_tags(text[])', 'EXECUTE')::int;
SELECT 1 / (NOT has_table_privilege('pgfence_worker', 'pgfence.secret_key', 'SELECT'))::int;
-- (the key is read when used, never a function's constant that plans could fold and show)
SELECT 1 / (to_regprocedure('pgfence._wakeup_key()') IS NULL)::int;

ROLLBACK;

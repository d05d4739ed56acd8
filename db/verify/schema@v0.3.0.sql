-- Verify pgfence:schema on pg

BEGIN;

SELECT 1 / (pgfence.schema_version() = 2)::int;

ROLLBACK;

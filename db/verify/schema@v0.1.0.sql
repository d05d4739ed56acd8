-- Verify pgfence:schema on pg

BEGIN;

SELECT pg_catalog.has_schema_privilege('pgfence', 'usage');
SELECT 1 / (pgfence.schema_version() = 1)::int;

ROLLBACK;

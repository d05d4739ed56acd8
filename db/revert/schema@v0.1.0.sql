-- Revert pgfence:schema from pg

BEGIN;

DROP FUNCTION pgfence.schema_version();
DROP SCHEMA pgfence;

COMMIT;

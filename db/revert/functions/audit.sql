-- Revert pgfence:functions/audit from pg

BEGIN;

DROP FUNCTION pgfence.purge_audit(integer);
DROP FUNCTION pgfence.set_audit_retention(interval);
DROP FUNCTION pgfence.audit_of(bigint);
DROP FUNCTION pgfence._audit(text, text[], bigint[], text, jsonb);
DROP FUNCTION pgfence._check_note(text, boolean);
DELETE FROM pgfence.routine_grants WHERE routine IN ('audit_of', 'set_audit_retention', 'purge_audit');

COMMIT;

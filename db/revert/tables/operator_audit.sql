-- Revert pgfence:tables/operator_audit from pg

BEGIN;

DROP TABLE pgfence.operator_audit_settings;
DROP TABLE pgfence.operator_audit;

COMMIT;

-- Verify pgfence:functions/audit on pg

BEGIN;

SELECT 'pgfence._audit(text, text[], bigint[], text, jsonb)'::regprocedure,
       'pgfence._check_note(text, boolean)'::regprocedure,
       'pgfence.audit_of(bigint)'::regprocedure,
       'pgfence.set_audit_retention(interval)'::regprocedure,
       'pgfence.purge_audit(integer)'::regprocedure;

ROLLBACK;

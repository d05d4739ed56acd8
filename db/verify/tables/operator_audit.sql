-- Verify pgfence:tables/operator_audit on pg

BEGIN;

SELECT id, at, db_role, login, actor, action, queues, job_ids, count, note, detail
  FROM pgfence.operator_audit WHERE false;
SELECT 1 / count(*) FROM pgfence.operator_audit_settings;

ROLLBACK;

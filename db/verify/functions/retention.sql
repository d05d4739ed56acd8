-- Verify pgfence:functions/retention on pg

BEGIN;

SELECT 'pgfence.purge_finished(integer)'::regprocedure,
       'pgfence.set_retention(text, interval, interval)'::regprocedure;
-- The rework after @v0.3.0: the purge deletes rejection_overflow rows too.
SELECT 1 / (prosrc LIKE '%DELETE FROM pgfence.rejection_overflow%')::int
  FROM pg_proc WHERE oid = 'pgfence.purge_finished(integer)'::regprocedure;
-- The rework after @v0.7.0: what it deletes is counted, and the audit purged.
SELECT 1 / (prosrc LIKE '%metric_totals%' AND prosrc LIKE '%purge_audit%')::int
  FROM pg_proc WHERE oid = 'pgfence.purge_finished(integer)'::regprocedure;
SELECT 'pgfence._forget_jobs(bigint[])'::regprocedure;

ROLLBACK;

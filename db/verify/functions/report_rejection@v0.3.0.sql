-- Verify pgfence:functions/report_rejection on pg

BEGIN;

SELECT 'pgfence.report_rejection(bigint, uuid, text)'::regprocedure;

ROLLBACK;

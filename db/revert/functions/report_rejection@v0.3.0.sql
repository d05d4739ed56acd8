-- Revert pgfence:functions/report_rejection from pg

BEGIN;

DROP FUNCTION pgfence.report_rejection(bigint, uuid, text);

COMMIT;

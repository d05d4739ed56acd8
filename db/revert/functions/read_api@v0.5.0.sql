-- Revert pgfence:functions/read_api from pg

BEGIN;

DROP FUNCTION IF EXISTS pgfence.job(bigint);
DROP FUNCTION IF EXISTS pgfence.attempts_of(bigint);
DROP FUNCTION IF EXISTS pgfence.rejections_of(bigint);
DROP FUNCTION IF EXISTS pgfence.rejections_not_stored(bigint);
DROP FUNCTION IF EXISTS pgfence.history_summary(interval);
DROP FUNCTION IF EXISTS pgfence._may_read_job(bigint);
DROP FUNCTION IF EXISTS pgfence._may_read(text);
DELETE FROM pgfence.routine_grants
 WHERE routine IN ('job', 'attempts_of', 'rejections_of', 'rejections_not_stored', 'history_summary');

COMMIT;

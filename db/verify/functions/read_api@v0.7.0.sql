-- Verify pgfence:functions/read_api on pg

BEGIN;

SELECT 'pgfence.job(bigint)'::regprocedure, 'pgfence.attempts_of(bigint)'::regprocedure,
       'pgfence.rejections_of(bigint)'::regprocedure, 'pgfence.rejections_not_stored(bigint)'::regprocedure,
       'pgfence.history_summary(interval)'::regprocedure, 'pgfence._may_read(text)'::regprocedure,
       'pgfence._may_read_job(bigint)'::regprocedure;

ROLLBACK;

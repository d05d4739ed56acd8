-- Verify pgfence:functions/read_api on pg

BEGIN;

SELECT 'pgfence.job(bigint)'::regprocedure, 'pgfence.attempts_of(bigint)'::regprocedure,
       'pgfence.rejections_of(bigint)'::regprocedure, 'pgfence.rejections_not_stored(bigint)'::regprocedure,
       'pgfence.history_summary(interval)'::regprocedure, 'pgfence._may_read(text)'::regprocedure,
       'pgfence._may_read_job(bigint)'::regprocedure;
-- The rework after @v0.7.0: viewers read every job; job() returns timeout and unique_for.
SELECT timeout, unique_for FROM pgfence.job(0) WHERE false;
SELECT 1 / (prosrc LIKE '%pgfence_viewer%')::int FROM pg_proc WHERE oid = 'pgfence._may_read(text)'::regprocedure;

-- (the reads of one job: no sequential scan, no JIT)
SELECT 1 / (count(*) = 4)::int FROM pg_proc
 WHERE oid IN ('pgfence.job(bigint)'::regprocedure, 'pgfence.attempts_of(bigint)'::regprocedure,
               'pgfence.rejections_of(bigint)'::regprocedure, 'pgfence.rejections_not_stored(bigint)'::regprocedure)
   AND proconfig @> '{enable_seqscan=off,jit=off}';

ROLLBACK;

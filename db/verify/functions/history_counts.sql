-- Verify pgfence:functions/history_counts on pg

BEGIN;

SELECT part, metric, queue, label, n FROM pgfence.history_counts WHERE false;
SELECT part, filenode FROM pgfence.history_count_marks WHERE false;
SELECT 1 / count(*)::int FROM pgfence.history_count_state;
SELECT 'pgfence._count_history()'::regprocedure, 'pgfence._history_stored()'::regprocedure;
-- metrics(), stats() and purge_finished are this change's: they use the counts.
SELECT 1 / (prosrc LIKE '%pgfence._history_stored()%')::int FROM pg_proc
 WHERE oid IN ('pgfence.metrics()'::regprocedure, 'pgfence.stats()'::regprocedure);
SELECT 1 / (prosrc LIKE '%pgfence._count_history()%'
            AND proconfig @> '{enable_seqscan=off,jit=off,lock_timeout=5s}')::int
  FROM pg_proc WHERE oid = 'pgfence.purge_finished(integer)'::regprocedure;

ROLLBACK;
